/* gloo_shim.h: the C ABI between package gloo and Gloo's C++ API. Every
 * function returns a status (DG_GLOO_OK or one of the codes below) and,
 * on failure, writes a NUL-terminated message into err (errlen bytes). No
 * C++ exception crosses it. The only state is the handles it returns. */
#ifndef DG_GLOO_SHIM_H
#define DG_GLOO_SHIM_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
	DG_GLOO_OK = 0,
	DG_GLOO_TIMEOUT = 1, /* Gloo's deadline passed */
	DG_GLOO_IO = 2,      /* a peer's connection failed (closed, reset) */
	DG_GLOO_ERROR = 3,   /* anything else */
	DG_GLOO_ABORTED = 4  /* dg_gloo_abort was called on the exchange's token */
};

/* dtype codes: 0 float32, 1 int32, 2 int64. op codes: 0 sum, 1 max, 2 min. */

/* dg_gloo_device opens Gloo's TCP transport on hostname or iface ("" both:
 * the address this host's name resolves to). */
int dg_gloo_device(const char *hostname, const char *iface, void **dev, char *err, size_t errlen);
void dg_gloo_device_free(void *dev);

/* dg_gloo_connect builds the full mesh of rank's size-rank context, meeting
 * the others through the store behind the Go handle store. */
int dg_gloo_connect(void *dev, uintptr_t store, int rank, int size, int64_t timeout_ms, void **ctx,
                    char *err, size_t errlen);
void dg_gloo_free(void *ctx);
/* dg_gloo_close closes every connection of ctx (after a failure: the
 * peers waiting on this rank fail at once instead of at their deadline). */
void dg_gloo_close(void *ctx);

/* dg_gloo_exchange sends mine (n bytes) to each of the npeers ranks and
 * receives theirs into theirs (npeers*n bytes, in arrival order; from[i]
 * is the sender of slot i). status[k] is, for peers[k], DG_GLOO_OK,
 * DG_GLOO_TIMEOUT (its bytes never came) or DG_GLOO_IO (its connection
 * failed). abort (NULL: none) is a token from dg_gloo_abort_new: a
 * dg_gloo_abort on it, before or during the call, makes it return
 * DG_GLOO_ABORTED at once, leaving the peers' connections as they are (the
 * posted buffers stay with ctx until dg_gloo_free: a peer may still write
 * to them). The caller treats the group as broken: calls already under
 * way may finish, no new one starts. */
int dg_gloo_exchange(void *ctx, uint64_t slot, const void *mine, size_t n, const int *peers, int npeers,
                     void *theirs, int *from, int *status, int64_t timeout_ms, void *abort, char *err,
                     size_t errlen);
/* An abort token: made before an exchange, aborted from another thread,
 * freed after the exchange returned. NULL from new: out of memory. */
void *dg_gloo_abort_new(void);
void dg_gloo_abort(void *abort);
void dg_gloo_abort_free(void *abort);

int dg_gloo_send(void *ctx, uint64_t slot, const void *buf, size_t n, int peer, int64_t timeout_ms,
                 char *err, size_t errlen);
int dg_gloo_recv(void *ctx, uint64_t slot, void *buf, size_t n, int peer, int64_t timeout_ms,
                 char *err, size_t errlen);

int dg_gloo_allreduce(void *ctx, uint32_t tag, void *buf, size_t count, int dtype, int op, int64_t timeout_ms,
                      char *err, size_t errlen);
/* dg_gloo_reduce reduces buf into root's buf; the others' buf is scratch. */
int dg_gloo_reduce(void *ctx, uint32_t tag, void *buf, size_t count, int dtype, int op, int root,
                   int64_t timeout_ms, char *err, size_t errlen);
/* dg_gloo_allgather: in is n bytes (NULL: already in out at rank*n). */
int dg_gloo_allgather(void *ctx, uint32_t tag, const void *in, void *out, size_t n, int64_t timeout_ms,
                      char *err, size_t errlen);
int dg_gloo_broadcast(void *ctx, uint32_t tag, void *buf, size_t n, int root, int64_t timeout_ms,
                      char *err, size_t errlen);
/* dg_gloo_alltoall: in and out are n bytes each (size equal chunks). */
int dg_gloo_alltoall(void *ctx, uint32_t tag, const void *in, void *out, size_t n, int64_t timeout_ms,
                     char *err, size_t errlen);

/* The rendezvous store, implemented in Go (store.go). get returns a
 * malloc'd value the caller frees. */
extern int dgGlooStoreSet(uintptr_t h, char *key, size_t klen, char *val, size_t vlen, char *err, size_t errlen);
extern int dgGlooStoreGet(uintptr_t h, char *key, size_t klen, char **val, size_t *vlen, char *err, size_t errlen);
extern int dgGlooStoreWait(uintptr_t h, char *keys, size_t klen, int64_t timeout_ms, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
