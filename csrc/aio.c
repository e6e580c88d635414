/* aio.c — the asynchronous I/O engine's front: configuration, files,
 * registered buffers, the request queue workers claim pieces from, and the
 * completion queue dg_aio_reap drains. How a piece moves is the back end's
 * (aio_uring.c, aio_threads.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aio_internal.h"

#define AIO_MAX_WORKERS 256

static int aligned(int64_t v) { return (v & (DG_AIO_ALIGN - 1)) == 0; }

static dg_status check_config(const dg_aio_config *c)
{
	if (c->block_size <= 0 || !aligned(c->block_size) || c->block_size > ((int64_t)1 << 30))
		return DG_ERR_INVALID;
	if (c->queue_depth < 1 || c->queue_depth > 4096 || c->thread_count < 1 || c->thread_count > AIO_MAX_WORKERS)
		return DG_ERR_INVALID;
	if (c->backend < DG_AIO_AUTO || c->backend > DG_AIO_THREADS)
		return DG_ERR_INVALID;
	if (c->inject < DG_AIO_FAULT_NONE || c->inject > DG_AIO_FAULT_EOF || c->inject_at < 0)
		return DG_ERR_INVALID;
	if (c->inject == DG_AIO_FAULT_ERRNO && c->inject_errno <= 0)
		return DG_ERR_INVALID;
	if (c->inject_op < DG_AIO_OP_ANY || c->inject_op > DG_AIO_OP_WRITE)
		return DG_ERR_INVALID;
	return DG_OK;
}

static void free_workers(dg_aio *a)
{
	for (int i = 0; i < a->nworkers; i++) {
		aio_uring_fini(&a->workers[i]);
		free(a->workers[i].ios);
		free(a->workers[i].free_ios);
	}
	free(a->workers);
	a->workers = NULL;
	a->nworkers = 0;
}

/* makes the workers' in-flight slots and, for io_uring, their rings; a ring
 * the kernel refuses under AUTO turns the engine into the thread pool */
static dg_status make_workers(dg_aio *a)
{
	int uring = a->backend != DG_AIO_THREADS;
	/* a blocking thread has one piece in flight: queue_depth per worker */
	int64_t n = uring ? a->cfg.thread_count : (int64_t)a->cfg.thread_count * a->cfg.queue_depth;
	if (n > AIO_MAX_WORKERS)
		n = AIO_MAX_WORKERS;
	int slots = uring ? a->cfg.queue_depth : 1;
	a->workers = calloc((size_t)n, sizeof *a->workers);
	if (a->workers == NULL)
		return DG_ERR_NOMEM;
	a->nworkers = (int)n;
	for (int i = 0; i < a->nworkers; i++) {
		aio_worker *w = &a->workers[i];
		w->a = a;
		w->ios = calloc((size_t)slots, sizeof *w->ios);
		w->free_ios = calloc((size_t)slots, sizeof *w->free_ios);
		if (w->ios == NULL || w->free_ios == NULL)
			return DG_ERR_NOMEM;
		for (int s = 0; s < slots; s++)
			w->free_ios[s] = s;
		w->nfree = slots;
		if (!uring)
			continue;
		int rc = aio_uring_init(w);
		if (rc == 0)
			continue;
		if (a->backend == DG_AIO_URING)
			return rc == -ENOMEM ? DG_ERR_NOMEM : DG_ERR_UNSUPPORTED;
		free_workers(a);
		a->backend = DG_AIO_THREADS;
		return make_workers(a);
	}
	return DG_OK;
}

dg_status dg_aio_open(const dg_aio_config *cfg, dg_aio **out)
{
	if (cfg == NULL || out == NULL)
		return DG_ERR_INVALID;
	*out = NULL;
	dg_status st = check_config(cfg);
	if (st != DG_OK)
		return st;
	dg_aio *a = calloc(1, sizeof *a);
	if (a == NULL)
		return DG_ERR_NOMEM;
	a->cfg = *cfg;
	a->backend = cfg->backend == DG_AIO_THREADS ? DG_AIO_THREADS : DG_AIO_URING;
	if (cfg->backend == DG_AIO_AUTO)
		a->backend = DG_AIO_AUTO;
	for (int i = 0; i < DG_AIO_MAX_FILES; i++)
		a->files[i].fd = -1;
	a->next_id = 1;
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->work_cv, NULL);
	pthread_cond_init(&a->done_cv, NULL);
	st = make_workers(a);
	if (st != DG_OK) {
		free_workers(a);
		dg_aio_destroy(a);
		return st;
	}
	if (a->backend == DG_AIO_AUTO)
		a->backend = DG_AIO_URING;
	a->stats.backend = a->backend;
	void *(*loop)(void *) = a->backend == DG_AIO_URING ? aio_uring_loop : aio_threads_loop;
	for (int i = 0; i < a->nworkers; i++) {
		if (pthread_create(&a->workers[i].thread, NULL, loop, &a->workers[i]) != 0) {
			dg_aio_destroy(a);
			return DG_ERR_NOMEM;
		}
		a->nstarted++;
	}
	*out = a;
	return DG_OK;
}

void dg_aio_shutdown(dg_aio *a)
{
	if (a == NULL)
		return;
	pthread_mutex_lock(&a->mu);
	int stop = !a->closing;
	a->closing = 1;
	pthread_cond_broadcast(&a->work_cv);
	pthread_cond_broadcast(&a->done_cv);
	pthread_mutex_unlock(&a->mu);
	if (!stop)
		return;
	for (int i = 0; i < a->nstarted; i++)
		pthread_join(a->workers[i].thread, NULL);
	pthread_mutex_lock(&a->mu);
	a->stopped = 1;
	pthread_cond_broadcast(&a->done_cv);
	pthread_mutex_unlock(&a->mu);
}

void dg_aio_destroy(dg_aio *a)
{
	if (a == NULL)
		return;
	dg_aio_shutdown(a);
	free_workers(a);
	for (aio_req *r = a->done_head, *next; r != NULL; r = next) {
		next = r->next;
		free(r);
	}
	for (int i = 0; i < DG_AIO_MAX_FILES; i++) {
		if (a->files[i].fd >= 0)
			close(a->files[i].fd);
		free(a->files[i].path);
	}
	pthread_mutex_destroy(&a->mu);
	pthread_cond_destroy(&a->work_cv);
	pthread_cond_destroy(&a->done_cv);
	free(a);
}

dg_status dg_aio_get_stats(dg_aio *a, dg_aio_stats *out)
{
	if (a == NULL || out == NULL)
		return DG_ERR_INVALID;
	pthread_mutex_lock(&a->mu);
	*out = a->stats;
	pthread_mutex_unlock(&a->mu);
	return DG_OK;
}

dg_status dg_aio_inject(dg_aio *a, dg_aio_fault kind, int err, dg_aio_op op, int64_t at)
{
	if (a == NULL)
		return DG_ERR_INVALID;
	pthread_mutex_lock(&a->mu);
	dg_aio_config c = a->cfg;
	c.inject = kind;
	c.inject_errno = err;
	c.inject_op = op;
	c.inject_at = at;
	if (check_config(&c) != DG_OK) {
		pthread_mutex_unlock(&a->mu);
		return DG_ERR_INVALID;
	}
	a->cfg.inject = kind;
	a->cfg.inject_errno = err;
	a->cfg.inject_op = op;
	a->cfg.inject_at = at;
	a->results_seen = 0;
	pthread_mutex_unlock(&a->mu);
	return DG_OK;
}

dg_status dg_aio_file_open(dg_aio *a, const char *path, int flags, int *file, int *err)
{
	if (a == NULL || path == NULL || file == NULL || err == NULL || (flags & ~15) != 0)
		return DG_ERR_INVALID;
	*file = -1;
	*err = 0;
	int oflags = O_CLOEXEC | ((flags & DG_AIO_WRITE) ? O_RDWR : O_RDONLY);
	if (flags & DG_AIO_CREATE)
		oflags |= O_CREAT;
	if (flags & DG_AIO_TRUNC)
		oflags |= O_TRUNC;
	int direct = !(flags & DG_AIO_BUFFERED);
	if (direct)
		oflags |= O_DIRECT;
	char *copy = strdup(path);
	if (copy == NULL)
		return DG_ERR_NOMEM;
	int fd;
	do
		fd = open(path, oflags, 0644);
	while (fd < 0 && errno == EINTR);
	if (fd < 0) {
		*err = errno;
		free(copy);
		return DG_ERR_IO;
	}
	pthread_mutex_lock(&a->mu);
	int slot = -1;
	for (int i = 0; i < DG_AIO_MAX_FILES && slot < 0; i++)
		if (a->files[i].fd < 0)
			slot = i;
	if (slot >= 0) {
		aio_file *f = &a->files[slot];
		free(f->path);
		f->fd = fd;
		f->direct = direct;
		f->users = 0;
		f->path = copy;
		f->gen++;
	}
	pthread_mutex_unlock(&a->mu);
	if (slot < 0) {
		close(fd);
		free(copy);
		return DG_ERR_SIZE;
	}
	*file = slot;
	return DG_OK;
}

dg_status dg_aio_file_close(dg_aio *a, int file)
{
	if (a == NULL || file < 0 || file >= DG_AIO_MAX_FILES)
		return DG_ERR_INVALID;
	pthread_mutex_lock(&a->mu);
	aio_file *f = &a->files[file];
	if (f->fd < 0 || f->users > 0) {
		pthread_mutex_unlock(&a->mu);
		return DG_ERR_INVALID;
	}
	int fd = f->fd;
	f->fd = -1;
	f->gen++;
	pthread_mutex_unlock(&a->mu);
	/* the path stays until the slot is reused: results may still name it */
	return close(fd) == 0 ? DG_OK : DG_ERR_IO;
}

const char *dg_aio_file_path(dg_aio *a, int file)
{
	if (a == NULL || file < 0 || file >= DG_AIO_MAX_FILES)
		return NULL;
	return a->files[file].path;
}

dg_status dg_aio_file_size(dg_aio *a, int file, int64_t *bytes, int *err)
{
	if (a == NULL || file < 0 || file >= DG_AIO_MAX_FILES || bytes == NULL || err == NULL)
		return DG_ERR_INVALID;
	*err = 0;
	pthread_mutex_lock(&a->mu);
	int fd = a->files[file].fd;
	pthread_mutex_unlock(&a->mu);
	if (fd < 0)
		return DG_ERR_INVALID;
	struct stat st;
	if (fstat(fd, &st) != 0) {
		*err = errno;
		return DG_ERR_IO;
	}
	*bytes = (int64_t)st.st_size;
	return DG_OK;
}

dg_status dg_aio_buffer_register(dg_aio *a, void *p, int64_t bytes, int *index)
{
	if (a == NULL || p == NULL || bytes <= 0 || index == NULL)
		return DG_ERR_INVALID;
	if (((uintptr_t)p & (DG_AIO_ALIGN - 1)) != 0)
		return DG_ERR_ALIGN;
	pthread_mutex_lock(&a->mu);
	int slot = -1;
	for (int i = 0; i < DG_AIO_MAX_BUFFERS && slot < 0; i++)
		if (a->bufs[i].p == NULL)
			slot = i;
	if (slot >= 0) {
		a->bufs[slot].p = p;
		a->bufs[slot].len = bytes;
		a->bufs[slot].gen++;
	}
	pthread_mutex_unlock(&a->mu);
	if (slot < 0)
		return DG_ERR_SIZE;
	*index = slot;
	return DG_OK;
}

dg_status dg_aio_buffer_unregister(dg_aio *a, int index)
{
	if (a == NULL || index < 0 || index >= DG_AIO_MAX_BUFFERS)
		return DG_ERR_INVALID;
	pthread_mutex_lock(&a->mu);
	dg_status st = a->bufs[index].p == NULL ? DG_ERR_INVALID : DG_OK;
	a->bufs[index].p = NULL;
	a->bufs[index].len = 0;
	a->bufs[index].gen++;
	pthread_mutex_unlock(&a->mu);
	return st;
}

/* under a->mu */
static void push_done(dg_aio *a, aio_req *r)
{
	a->files[r->file].users--;
	r->next = NULL;
	if (a->done_tail)
		a->done_tail->next = r;
	else
		a->done_head = r;
	a->done_tail = r;
	pthread_cond_broadcast(&a->done_cv);
}

dg_status dg_aio_submit(dg_aio *a, int file, int write, void *buf, int64_t bytes, int64_t offset, int64_t *id)
{
	if (a == NULL || id == NULL || file < 0 || file >= DG_AIO_MAX_FILES || bytes < 0 || offset < 0 ||
	    (bytes > 0 && buf == NULL) || bytes > INT64_MAX - offset)
		return DG_ERR_INVALID;
	aio_req *r = calloc(1, sizeof *r);
	if (r == NULL)
		return DG_ERR_NOMEM;
	pthread_mutex_lock(&a->mu);
	aio_file *f = &a->files[file];
	dg_status st = DG_OK;
	if (a->closing || f->fd < 0)
		st = DG_ERR_INVALID;
	else if (f->direct && (((uintptr_t)buf & (DG_AIO_ALIGN - 1)) != 0 || !aligned(bytes) || !aligned(offset)))
		st = DG_ERR_ALIGN;
	if (st != DG_OK) {
		pthread_mutex_unlock(&a->mu);
		free(r);
		return st;
	}
	r->id = a->next_id++;
	r->file = file;
	r->write = write != 0;
	r->buf = buf;
	r->bytes = bytes;
	r->offset = offset;
	r->buf_index = -1;
	for (int i = 0; i < DG_AIO_MAX_BUFFERS && bytes > 0; i++) {
		char *p = a->bufs[i].p;
		if (p != NULL && (char *)buf >= p && (char *)buf + bytes <= p + a->bufs[i].len) {
			r->buf_index = i;
			break;
		}
	}
	r->npieces = (bytes + a->cfg.block_size - 1) / a->cfg.block_size;
	r->res.id = r->id;
	r->res.file = file;
	r->res.status = DG_OK;
	f->users++;
	a->outstanding++;
	*id = r->id;
	if (r->npieces == 0) {
		push_done(a, r);
	} else {
		if (a->pend_tail)
			a->pend_tail->next = r;
		else
			a->pend_head = r;
		a->pend_tail = r;
		pthread_cond_broadcast(&a->work_cv);
	}
	pthread_mutex_unlock(&a->mu);
	return DG_OK;
}

dg_status dg_aio_reap(dg_aio *a, dg_aio_result *out, int max, int nonblocking, int *n)
{
	if (a == NULL || out == NULL || max < 1 || n == NULL)
		return DG_ERR_INVALID;
	*n = 0;
	pthread_mutex_lock(&a->mu);
	while (!nonblocking && a->done_head == NULL && !(a->closing && a->outstanding == 0))
		pthread_cond_wait(&a->done_cv, &a->mu);
	int k = 0;
	while (k < max && a->done_head != NULL) {
		aio_req *r = a->done_head;
		a->done_head = r->next;
		if (a->done_head == NULL)
			a->done_tail = NULL;
		out[k++] = r->res;
		free(r);
		a->outstanding--;
	}
	pthread_mutex_unlock(&a->mu);
	*n = k;
	return DG_OK;
}

static void unlink_pending(dg_aio *a, aio_req *r)
{
	aio_req *prev = NULL;
	for (aio_req *q = a->pend_head; q != NULL; prev = q, q = q->next) {
		if (q != r)
			continue;
		if (prev)
			prev->next = r->next;
		else
			a->pend_head = r->next;
		if (a->pend_tail == r)
			a->pend_tail = prev;
		r->next = NULL;
		return;
	}
}

int aio_claim(dg_aio *a, aio_io *io)
{
	aio_req *r = a->pend_head;
	if (r == NULL)
		return 0;
	int64_t k = r->next_piece++;
	int64_t start = k * a->cfg.block_size;
	io->r = r;
	io->buf = r->buf + start;
	io->off = r->offset + start;
	io->len = r->bytes - start < a->cfg.block_size ? r->bytes - start : a->cfg.block_size;
	io->done = 0;
	r->inflight++;
	if (r->next_piece == r->npieces)
		unlink_pending(a, r);
	return 1;
}

int aio_has_work(const dg_aio *a) { return a->pend_head != NULL; }

int64_t aio_inject(dg_aio *a, const aio_io *io, int64_t res)
{
	dg_aio_op op = io->r->write ? DG_AIO_OP_WRITE : DG_AIO_OP_READ;
	if (a->cfg.inject_op != DG_AIO_OP_ANY && a->cfg.inject_op != op)
		return res;
	int64_t seen = a->results_seen++;
	if (a->cfg.inject == DG_AIO_FAULT_NONE || seen != a->cfg.inject_at)
		return res;
	switch (a->cfg.inject) {
	case DG_AIO_FAULT_ERRNO: return -(int64_t)a->cfg.inject_errno;
	case DG_AIO_FAULT_EOF: return 0;
	case DG_AIO_FAULT_SHORT: {
		int64_t half = ((io->len - io->done) / 2) & ~(int64_t)(DG_AIO_ALIGN - 1);
		return half > 0 && half < res ? half : res;
	}
	default: return res;
	}
}

/* a request reports its failure at the lowest offset: pieces in flight
 * complete in any order (two blocks past the end of a file both read 0
 * bytes), and the caller needs where the data stopped, the same every run.
 * Its pieces not yet claimed are dropped at the first failure. */
static void fail(dg_aio *a, aio_req *r, int err, int64_t off)
{
	if (r->res.status != DG_OK) {
		if (off < r->res.err_offset) {
			r->res.err = err;
			r->res.err_offset = off;
		}
		return;
	}
	r->res.status = DG_ERR_IO;
	r->res.err = err;
	r->res.err_offset = off;
	if (r->next_piece < r->npieces) {
		r->finished += r->npieces - r->next_piece;
		r->next_piece = r->npieces;
		unlink_pending(a, r);
	}
}

int aio_progress(dg_aio *a, aio_io *io, int64_t res)
{
	aio_req *r = io->r;
	res = aio_inject(a, io, res);
	int ok = r->res.status == DG_OK;
	if (res == -EINTR || res == -EAGAIN) {
		a->stats.retries++;
		if (ok)
			return 1;
	} else if (res < 0) {
		fail(a, r, (int)-res, io->off + io->done);
	} else if (res == 0) {
		fail(a, r, DG_AIO_ERR_EOF, io->off + io->done);
	} else {
		io->done += res;
		if (io->done < io->len) {
			a->stats.resumed++;
			if (ok)
				return 1;
		} else {
			a->stats.pieces++;
		}
	}
	r->inflight--;
	r->finished++;
	if (r->finished == r->npieces && r->inflight == 0)
		push_done(a, r);
	return 0;
}
