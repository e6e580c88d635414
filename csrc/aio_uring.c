/* aio_uring.c — the io_uring back end: each worker owns a ring, keeps up to
 * queue_depth pieces in it, and registers the engine's files and buffers
 * with it lazily (a slot is re-registered when its generation changes). */
#define _GNU_SOURCE
#include <errno.h>
#include <liburing.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/uio.h>

#include "aio_internal.h"

int aio_uring_init(aio_worker *w)
{
	struct io_uring *ring = calloc(1, sizeof *ring);
	if (ring == NULL)
		return -ENOMEM;
	unsigned entries = 1;
	while (entries < (unsigned)w->a->cfg.queue_depth)
		entries <<= 1;
	int rc = io_uring_queue_init(entries, ring, 0);
	if (rc < 0) {
		free(ring);
		return rc;
	}
	w->ring = ring;
	/* registration is an optimisation: a kernel without sparse tables
	 * still runs every piece, on plain descriptors and buffers */
	w->files_ok = io_uring_register_files_sparse(ring, DG_AIO_MAX_FILES) == 0;
	w->bufs_ok = io_uring_register_buffers_sparse(ring, DG_AIO_MAX_BUFFERS) == 0;
	return 0;
}

void aio_uring_fini(aio_worker *w)
{
	if (w->ring == NULL)
		return;
	io_uring_queue_exit(w->ring);
	free(w->ring);
	w->ring = NULL;
}

/* under a->mu: brings this ring's registration of the piece's file and
 * buffer up to date; reports which of them a fixed operation may use */
static void sync_slots(aio_worker *w, const aio_req *r, int *fixed_file, int *fixed_buf)
{
	dg_aio *a = w->a;
	struct io_uring *ring = w->ring;
	const aio_file *f = &a->files[r->file];
	*fixed_file = 0;
	*fixed_buf = 0;
	if (w->files_ok) {
		if (w->file_gen[r->file] != f->gen) {
			int fd = f->fd;
			if (io_uring_register_files_update(ring, (unsigned)r->file, &fd, 1) == 1)
				w->file_gen[r->file] = f->gen;
		}
		*fixed_file = w->file_gen[r->file] == f->gen;
	}
	if (w->bufs_ok && r->buf_index >= 0) {
		const aio_buf *b = &a->bufs[r->buf_index];
		if (w->buf_gen[r->buf_index] != b->gen) {
			struct iovec iov = {.iov_base = b->p, .iov_len = (size_t)b->len};
			w->buf_fixed[r->buf_index] =
				io_uring_register_buffers_update_tag(ring, (unsigned)r->buf_index, &iov, NULL, 1) == 1;
			w->buf_gen[r->buf_index] = b->gen;
		}
		*fixed_buf = w->buf_fixed[r->buf_index];
	}
}

/* under a->mu: queues the rest of slot's piece on the ring */
static void prep(aio_worker *w, int slot)
{
	dg_aio *a = w->a;
	aio_io *io = &w->ios[slot];
	const aio_req *r = io->r;
	int fixed_file, fixed_buf;
	sync_slots(w, r, &fixed_file, &fixed_buf);
	struct io_uring_sqe *sqe = io_uring_get_sqe(w->ring);
	/* never NULL: the ring has queue_depth entries, and at most that many
	 * pieces are prepared before a submit */
	int fd = fixed_file ? r->file : a->files[r->file].fd;
	void *p = io->buf + io->done;
	unsigned n = (unsigned)(io->len - io->done);
	uint64_t off = (uint64_t)(io->off + io->done);
	if (fixed_buf && r->write)
		io_uring_prep_write_fixed(sqe, fd, p, n, off, r->buf_index);
	else if (fixed_buf)
		io_uring_prep_read_fixed(sqe, fd, p, n, off, r->buf_index);
	else if (r->write)
		io_uring_prep_write(sqe, fd, p, n, off);
	else
		io_uring_prep_read(sqe, fd, p, n, off);
	if (fixed_file)
		sqe->flags |= IOSQE_FIXED_FILE;
	if (fixed_file && fixed_buf)
		a->stats.fixed++;
	io_uring_sqe_set_data64(sqe, (uint64_t)slot);
}

static void submit(aio_worker *w)
{
	while (io_uring_submit(w->ring) == -EINTR)
		;
}

/* submits what is prepared and waits for a completion. The CQ ring holds
 * twice queue_depth, so it cannot overflow (EBUSY); EINTR and EAGAIN (the
 * kernel short of memory for a moment) just come round again, and pieces a
 * failed enter left in the SQ ring go with the next one. */
static void submit_and_wait(aio_worker *w)
{
	int rc = io_uring_submit_and_wait(w->ring, 1);
	if (rc == -EAGAIN || rc == -EBUSY)
		sched_yield();
}

void *aio_uring_loop(void *arg)
{
	aio_worker *w = arg;
	dg_aio *a = w->a;
	struct io_uring *ring = w->ring;
	int slots = a->cfg.queue_depth, inflight = 0;
	for (;;) {
		pthread_mutex_lock(&a->mu);
		while (inflight == 0 && !a->closing && !aio_has_work(a))
			pthread_cond_wait(&a->work_cv, &a->mu);
		if (inflight == 0 && !aio_has_work(a)) {
			pthread_mutex_unlock(&a->mu);
			break;
		}
		/* without overlap_events a batch is issued only once the last
		 * one has fully completed */
		if (a->cfg.overlap_events || inflight == 0) {
			while (w->nfree > 0) {
				int slot = w->free_ios[w->nfree - 1];
				if (!aio_claim(a, &w->ios[slot]))
					break;
				w->nfree--;
				prep(w, slot);
				inflight++;
				if (a->cfg.single_submit) {
					pthread_mutex_unlock(&a->mu);
					submit(w);
					pthread_mutex_lock(&a->mu);
				}
			}
		}
		pthread_mutex_unlock(&a->mu);
		if (inflight == 0)
			continue;
		submit_and_wait(w);
		struct io_uring_cqe *cqe;
		pthread_mutex_lock(&a->mu);
		while (io_uring_peek_cqe(ring, &cqe) == 0) {
			int slot = (int)io_uring_cqe_get_data64(cqe);
			int64_t res = cqe->res;
			io_uring_cqe_seen(ring, cqe);
			if (slot < 0 || slot >= slots)
				continue;
			if (aio_progress(a, &w->ios[slot], res)) {
				prep(w, slot); /* submitted with the next batch */
			} else {
				inflight--;
				w->free_ios[w->nfree++] = slot;
			}
		}
		pthread_mutex_unlock(&a->mu);
	}
	return NULL;
}
