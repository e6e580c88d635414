/*
 * aio_internal.h — what the asynchronous I/O engine's files share: the
 * engine, its requests and the piece a worker has in flight. aio.c owns the
 * request queue (claiming pieces, completing them); aio_uring.c and
 * aio_threads.c are the two ways a worker moves a piece.
 */
#ifndef DG_AIO_INTERNAL_H
#define DG_AIO_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "deepgo.h"

typedef struct aio_req {
	int64_t id;
	int file;
	int write;
	char *buf;
	int64_t bytes, offset;
	int buf_index;  /* registered buffer holding [buf, buf+bytes), or -1 */
	int64_t npieces, next_piece, finished;
	int inflight;
	dg_aio_result res;
	struct aio_req *next;
} aio_req;

/* one piece in flight: the rest of it still to move is [buf+done, len) */
typedef struct aio_io {
	aio_req *r;
	char *buf;
	int64_t off, len, done;
} aio_io;

typedef struct aio_file {
	int fd; /* -1 when the slot is free */
	int direct;
	int users; /* requests submitted and not yet completed */
	uint32_t gen; /* bumped on every open and close, so rings re-register */
	char *path;
} aio_file;

typedef struct aio_buf {
	char *p; /* NULL when free */
	int64_t len;
	uint32_t gen;
} aio_buf;

struct dg_aio;

typedef struct aio_worker {
	struct dg_aio *a;
	pthread_t thread;
	void *ring; /* struct io_uring *, io_uring back end only */
	int files_ok, bufs_ok; /* registration tables exist on this ring */
	/* the generation of each slot this ring has registered; a buffer the
	 * ring could not pin is marked in buf_fixed = 0 and used unregistered */
	uint32_t file_gen[DG_AIO_MAX_FILES], buf_gen[DG_AIO_MAX_BUFFERS];
	char buf_fixed[DG_AIO_MAX_BUFFERS];
	aio_io *ios; /* queue_depth slots */
	int *free_ios;
	int nfree;
} aio_worker;

struct dg_aio {
	dg_aio_config cfg;
	dg_aio_backend backend;
	pthread_mutex_t mu;
	pthread_cond_t work_cv, done_cv;
	aio_req *pend_head, *pend_tail; /* requests with pieces not yet claimed */
	aio_req *done_head, *done_tail;
	int64_t next_id, outstanding; /* submitted, not yet reaped */
	int closing, stopped;
	int nworkers, nstarted; /* made, and with a running thread */
	aio_worker *workers;
	aio_file files[DG_AIO_MAX_FILES];
	aio_buf bufs[DG_AIO_MAX_BUFFERS];
	int64_t results_seen; /* raw transfer results, for fault injection */
	dg_aio_stats stats;
};

/* under a->mu: claims the next piece of the oldest request, or returns 0 */
int aio_claim(struct dg_aio *a, aio_io *io);
/* under a->mu: replaces res (bytes moved, or -errno) by the injected fault
 * when this is the chosen result */
int64_t aio_inject(struct dg_aio *a, const aio_io *io, int64_t res);
/* under a->mu: folds res into io. Returns 1 when io needs resubmitting (a
 * retry or the rest of a short transfer), 0 when the piece is finished. */
int aio_progress(struct dg_aio *a, aio_io *io, int64_t res);
/* under a->mu: true while a worker should keep going */
int aio_has_work(const struct dg_aio *a);

/* back ends: start a worker's resources (0 or -errno), its loop, its teardown */
int aio_uring_init(aio_worker *w);
void *aio_uring_loop(void *w);
void aio_uring_fini(aio_worker *w);
void *aio_threads_loop(void *w);

#endif
