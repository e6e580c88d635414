/* test_aio.c — the asynchronous I/O engine on both back ends: round trips
 * longer than a block and not a multiple of it, many requests at once,
 * registered buffers, and every injected fault (ENOSPC, EIO, EINTR, short
 * transfer, end of file) ending as the right result at the right offset,
 * armed at open or on a running engine for reads or writes only. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "test_util.h"

#define BS ((int64_t)65536)

static char dir[256];
static int buffered; /* the temp dir's file system has no O_DIRECT */

static dg_aio_config config(dg_aio_backend b, int qd, int threads)
{
	dg_aio_config c = {0};
	c.block_size = BS;
	c.queue_depth = qd;
	c.thread_count = threads;
	c.overlap_events = 1;
	c.backend = b;
	return c;
}

static int open_file(dg_aio *a, const char *name, int *file)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	int err = 0;
	int flags = DG_AIO_WRITE | DG_AIO_CREATE | (buffered ? DG_AIO_BUFFERED : 0);
	dg_status st = dg_aio_file_open(a, path, flags, file, &err);
	if (st != DG_OK)
		fprintf(stderr, "open %s: %s (errno %d)\n", path, dg_strerror(st), err);
	return st == DG_OK;
}

/* opens an engine on c and a file in it; NULL (a failure counted) if either fails */
static dg_aio *open_engine(const dg_aio_config *c, const char *name, int *file)
{
	dg_aio *a = NULL;
	CHECK_OK(dg_aio_open(c, &a));
	if (a != NULL && open_file(a, name, file))
		return a;
	test_failures++;
	dg_aio_destroy(a);
	return NULL;
}

/* submits one request and waits for its result */
static dg_aio_result run1(dg_aio *a, int file, int write, void *buf, int64_t n, int64_t off)
{
	dg_aio_result r = {0};
	int64_t id = 0;
	int got = 0;
	CHECK_OK(dg_aio_submit(a, file, write, buf, n, off, &id));
	CHECK_OK(dg_aio_reap(a, &r, 1, 0, &got));
	CHECK(got == 1 && r.id == id);
	return r;
}

static void fill(char *p, int64_t n, uint64_t seed)
{
	for (int64_t i = 0; i < n; i++)
		p[i] = (char)rng_next(&seed);
}

static void round_trip(dg_aio_backend b, int qd, int threads, int overlap, int single, int reg)
{
	dg_aio_config c = config(b, qd, threads);
	c.overlap_events = overlap;
	c.single_submit = single;
	int f;
	dg_aio *a = open_engine(&c, "rt", &f);
	if (a == NULL)
		return;
	const int64_t n = 5 * BS + 3 * 4096; /* not a multiple of the block */
	char *w = NULL, *r = NULL;
	CHECK_OK(dg_alloc((size_t)n, 4096, 0, (void **)&w));
	CHECK_OK(dg_alloc((size_t)n, 4096, 0, (void **)&r));
	int wi = -1, ri = -1;
	if (reg) {
		CHECK_OK(dg_aio_buffer_register(a, w, n, &wi));
		CHECK_OK(dg_aio_buffer_register(a, r, n, &ri));
	}
	fill(w, n, 42 + (uint64_t)qd);
	dg_aio_result res = run1(a, f, 1, w, n, 8192);
	CHECK(res.status == DG_OK);
	res = run1(a, f, 0, r, n, 8192);
	CHECK(res.status == DG_OK);
	CHECK(memcmp(w, r, (size_t)n) == 0);
	int64_t size = 0;
	int err = 0;
	CHECK_OK(dg_aio_file_size(a, f, &size, &err));
	CHECK(size == 8192 + n);
	dg_aio_stats st;
	CHECK_OK(dg_aio_get_stats(a, &st));
	CHECK(st.pieces == 12);
	CHECK(st.backend == b);
	if (reg && b == DG_AIO_URING && !buffered)
		CHECK(st.fixed > 0);
	if (reg) {
		CHECK_OK(dg_aio_buffer_unregister(a, wi));
		CHECK_OK(dg_aio_buffer_unregister(a, ri));
		CHECK(dg_aio_buffer_unregister(a, ri) == DG_ERR_INVALID);
	}
	CHECK_OK(dg_aio_file_close(a, f));
	CHECK(dg_aio_file_close(a, f) == DG_ERR_INVALID);
	dg_aio_destroy(a);
	dg_free(w);
	dg_free(r);
}

/* 40 requests in flight at once, each reported exactly once */
static void many(dg_aio_backend b)
{
	dg_aio_config c = config(b, 8, 2);
	int f;
	dg_aio *a = open_engine(&c, "many", &f);
	if (a == NULL)
		return;
	enum { N = 40 };
	const int64_t each = 2 * BS + 4096;
	char *w = NULL, *r = NULL;
	CHECK_OK(dg_alloc((size_t)(N * each), 4096, 0, (void **)&w));
	CHECK_OK(dg_alloc((size_t)(N * each), 4096, 0, (void **)&r));
	fill(w, N * each, 7);
	int64_t ids[N];
	for (int pass = 0; pass < 2; pass++) {
		char *buf = pass == 0 ? w : r;
		for (int i = 0; i < N; i++)
			CHECK_OK(dg_aio_submit(a, f, pass == 0, buf + i * each, each, i * each, &ids[i]));
		int seen[N] = {0};
		for (int got = 0; got < N;) {
			dg_aio_result res[8];
			int k = 0;
			CHECK_OK(dg_aio_reap(a, res, 8, 0, &k));
			for (int j = 0; j < k; j++) {
				CHECK(res[j].status == DG_OK);
				for (int i = 0; i < N; i++)
					if (ids[i] == res[j].id)
						seen[i]++;
			}
			got += k;
		}
		for (int i = 0; i < N; i++)
			CHECK(seen[i] == 1);
	}
	CHECK(memcmp(w, r, (size_t)(N * each)) == 0);
	dg_aio_shutdown(a);
	int k = -1;
	dg_aio_result res;
	CHECK_OK(dg_aio_reap(a, &res, 1, 0, &k));
	CHECK(k == 0);
	int64_t id;
	CHECK(dg_aio_submit(a, f, 0, r, 4096, 0, &id) == DG_ERR_INVALID);
	dg_aio_destroy(a);
	dg_free(w);
	dg_free(r);
}

typedef struct fault_case {
	const char *name;
	dg_aio_fault kind;
	int errnum;
	int64_t at;
	int write;
	dg_status want;
	int want_err;
} fault_case;

static void faults(dg_aio_backend b)
{
	static const fault_case cases[] = {
		{"enospc write", DG_AIO_FAULT_ERRNO, ENOSPC, 2, 1, DG_ERR_IO, ENOSPC},
		{"eio read", DG_AIO_FAULT_ERRNO, EIO, 3, 0, DG_ERR_IO, EIO},
		{"eintr retried", DG_AIO_FAULT_ERRNO, EINTR, 1, 0, DG_OK, 0},
		{"short read resumed", DG_AIO_FAULT_SHORT, 0, 2, 0, DG_OK, 0},
		{"short write resumed", DG_AIO_FAULT_SHORT, 0, 0, 1, DG_OK, 0},
		{"eof read", DG_AIO_FAULT_EOF, 0, 1, 0, DG_ERR_IO, DG_AIO_ERR_EOF},
	};
	const int64_t n = 4 * BS;
	char *w = NULL, *r = NULL;
	CHECK_OK(dg_alloc((size_t)n, 4096, 0, (void **)&w));
	CHECK_OK(dg_alloc((size_t)n, 4096, 0, (void **)&r));
	fill(w, n, 99);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const fault_case *fc = &cases[i];
		/* one worker, one piece at a time: the k-th result is the k-th piece */
		dg_aio_config c = config(b, 1, 1);
		c.inject = fc->kind;
		c.inject_errno = fc->errnum;
		/* a read case first writes the file fault-free: n/BS results */
		c.inject_at = fc->at + (fc->write ? 0 : n / BS);
		int f;
		dg_aio *a = open_engine(&c, "fault", &f);
		if (a == NULL)
			continue;
		memset(r, 0, (size_t)n);
		dg_aio_result res = {0};
		if (fc->write) {
			res = run1(a, f, 1, w, n, 0);
		} else {
			CHECK(run1(a, f, 1, w, n, 0).status == DG_OK);
			res = run1(a, f, 0, r, n, 0);
		}
		dg_aio_stats st;
		CHECK_OK(dg_aio_get_stats(a, &st));
		int bad = res.status != fc->want || res.err != fc->want_err;
		if (fc->want != DG_OK)
			bad |= res.err_offset != fc->at * BS;
		else if (!fc->write)
			bad |= memcmp(w, r, (size_t)n) != 0;
		if (fc->kind == DG_AIO_FAULT_SHORT)
			bad |= st.resumed != 1;
		if (fc->errnum == EINTR)
			bad |= st.retries != 1;
		if (bad) {
			fprintf(stderr, "%s/%s: status %d err %d offset %lld resumed %lld retries %lld\n",
				b == DG_AIO_URING ? "uring" : "threads", fc->name, res.status, res.err,
				(long long)res.err_offset, (long long)st.resumed, (long long)st.retries);
			test_failures++;
		}
		if (fc->write && fc->want == DG_OK) {
			CHECK(run1(a, f, 0, r, n, 0).status == DG_OK);
			CHECK(memcmp(w, r, (size_t)n) == 0);
		}
		dg_aio_destroy(a);
	}
	/* a read past the end of the file ends at the end of the file */
	dg_aio_config c = config(b, 2, 1);
	dg_aio *a = NULL;
	CHECK_OK(dg_aio_open(&c, &a));
	int f;
	if (open_file(a, "short", &f)) {
		CHECK(run1(a, f, 1, w, BS, 0).status == DG_OK);
		dg_aio_result res = run1(a, f, 0, r, 3 * BS, 0);
		CHECK(res.status == DG_ERR_IO && res.err == DG_AIO_ERR_EOF && res.err_offset == BS);
		int64_t id;
		if (!buffered) {
			CHECK(dg_aio_submit(a, f, 0, r + 1, 4096, 0, &id) == DG_ERR_ALIGN);
			CHECK(dg_aio_submit(a, f, 0, r, 100, 0, &id) == DG_ERR_ALIGN);
			CHECK(dg_aio_submit(a, f, 0, r, 4096, 10, &id) == DG_ERR_ALIGN);
		}
		CHECK(dg_aio_submit(a, 200, 0, r, 4096, 0, &id) == DG_ERR_INVALID);
	}
	dg_aio_destroy(a);
	dg_free(w);
	dg_free(r);
}

/* a fault armed at run time counts only its op's results from then on */
static void armed(dg_aio_backend b)
{
	const int64_t n = 2 * BS;
	char *w = NULL;
	CHECK_OK(dg_alloc((size_t)n, 4096, 0, (void **)&w));
	fill(w, n, 7);
	dg_aio_config c = config(b, 1, 1);
	int f;
	dg_aio *a = open_engine(&c, "armed", &f);
	if (a != NULL) {
		CHECK(run1(a, f, 1, w, n, 0).status == DG_OK);
		CHECK_OK(dg_aio_inject(a, DG_AIO_FAULT_ERRNO, ENOSPC, DG_AIO_OP_WRITE, 1));
		CHECK(run1(a, f, 0, w, n, 0).status == DG_OK); /* reads do not count */
		dg_aio_result r = run1(a, f, 1, w, n, 0);
		CHECK(r.status == DG_ERR_IO && r.err == ENOSPC && r.err_offset == BS);
		CHECK_OK(dg_aio_inject(a, DG_AIO_FAULT_NONE, 0, DG_AIO_OP_ANY, 0));
		CHECK(run1(a, f, 1, w, n, 0).status == DG_OK);
		CHECK(dg_aio_inject(a, DG_AIO_FAULT_ERRNO, 0, DG_AIO_OP_READ, 0) == DG_ERR_INVALID);
		CHECK(dg_aio_inject(a, DG_AIO_FAULT_EOF, 0, (dg_aio_op)5, 0) == DG_ERR_INVALID);
		CHECK(dg_aio_inject(NULL, DG_AIO_FAULT_NONE, 0, DG_AIO_OP_ANY, 0) == DG_ERR_INVALID);
		dg_aio_destroy(a);
	}
	dg_free(w);
}

static void bad_configs(void)
{
	dg_aio *a = NULL;
	dg_aio_config c = config(DG_AIO_THREADS, 4, 1);
	CHECK(dg_aio_open(NULL, &a) == DG_ERR_INVALID);
	c.block_size = 1000;
	CHECK(dg_aio_open(&c, &a) == DG_ERR_INVALID && a == NULL);
	c = config(DG_AIO_THREADS, 0, 1);
	CHECK(dg_aio_open(&c, &a) == DG_ERR_INVALID);
	c = config(DG_AIO_THREADS, 4, 0);
	CHECK(dg_aio_open(&c, &a) == DG_ERR_INVALID);
	c = config((dg_aio_backend)9, 4, 1);
	CHECK(dg_aio_open(&c, &a) == DG_ERR_INVALID);
	c = config(DG_AIO_THREADS, 4, 1);
	c.inject = DG_AIO_FAULT_ERRNO;
	CHECK(dg_aio_open(&c, &a) == DG_ERR_INVALID);
	dg_aio_destroy(NULL);
	dg_aio_shutdown(NULL);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, sizeof dir, "%s/dg_aio_XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (mkdtemp(dir) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	/* tmpfs has no O_DIRECT: say so and test the buffered mode there */
	dg_aio_config c = config(DG_AIO_THREADS, 1, 1);
	dg_aio *a = NULL;
	CHECK_OK(dg_aio_open(&c, &a));
	char path[512];
	snprintf(path, sizeof path, "%s/probe", dir);
	int f, err;
	if (dg_aio_file_open(a, path, DG_AIO_WRITE | DG_AIO_CREATE, &f, &err) != DG_OK && err == EINVAL) {
		printf("test_aio: %s has no O_DIRECT; testing buffered files\n", dir);
		buffered = 1;
	}
	dg_aio_destroy(a);
	unlink(path);

	bad_configs();
	dg_aio_backend backends[2] = {DG_AIO_THREADS, DG_AIO_URING};
	for (int i = 0; i < 2; i++) {
		dg_aio_backend b = backends[i];
		c = config(b, 4, 1);
		if (dg_aio_open(&c, &a) == DG_ERR_UNSUPPORTED) {
			printf("test_aio: io_uring refused by this kernel; its cases skipped\n");
			continue;
		}
		dg_aio_destroy(a);
		round_trip(b, 4, 1, 1, 0, 0);
		round_trip(b, 1, 1, 1, 0, 0);
		round_trip(b, 3, 2, 0, 1, 0);
		round_trip(b, 8, 2, 1, 0, 1);
		many(b);
		faults(b);
		armed(b);
	}
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	return test_done("test_aio");
}
