/* aio_threads.c — the fallback back end: blocking pread/pwrite, one piece
 * per thread, queue_depth threads per configured worker. */
#define _GNU_SOURCE
#include <errno.h>
#include <unistd.h>

#include "aio_internal.h"

void *aio_threads_loop(void *arg)
{
	aio_worker *w = arg;
	dg_aio *a = w->a;
	aio_io io;
	pthread_mutex_lock(&a->mu);
	for (;;) {
		while (!a->closing && !aio_has_work(a))
			pthread_cond_wait(&a->work_cv, &a->mu);
		if (!aio_has_work(a))
			break;
		aio_claim(a, &io);
		/* the file stays open while the request counts as its user */
		int fd = a->files[io.r->file].fd, write = io.r->write;
		int again;
		do {
			pthread_mutex_unlock(&a->mu);
			char *p = io.buf + io.done;
			size_t n = (size_t)(io.len - io.done);
			off_t off = (off_t)(io.off + io.done);
			ssize_t got = write ? pwrite(fd, p, n, off) : pread(fd, p, n, off);
			int64_t res = got < 0 ? -(int64_t)errno : (int64_t)got;
			pthread_mutex_lock(&a->mu);
			again = aio_progress(a, &io, res);
		} while (again);
	}
	pthread_mutex_unlock(&a->mu);
	return NULL;
}
