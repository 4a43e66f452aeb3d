/* libfmstack: fmstack's checkpoint engine and supervised-run hooks for
 * programs that are not fmstack's own trainer (a PyTorch script, a C++
 * trainer of yours). Plain C, so that ctypes, cffi or any language can bind
 * it. The ABI is versioned: FMSTACK_C_API_VERSION changes when a struct or a
 * signature does, and fmstack_c_api_version() says which one the loaded
 * library speaks.
 *
 * Errors: functions that can fail return 0 on success and -1 on failure,
 * and then the handle's fmstack_*_error() text says what failed (file, tensor
 * or rank, and what was expected). Opening functions write the error into a
 * caller's buffer instead. No function exits or aborts the process.
 *
 * Threads: one handle is used by one thread at a time. */
#ifndef FMSTACK_C_API_H
#define FMSTACK_C_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden symbols; these are its exports. */
#if defined(FMSTACK_C_BUILD) && defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define FMSTACK_C_API_VERSION 2

int fmstack_c_api_version(void);

/* Element types, as safetensors names them. */
typedef enum {
  FMSTACK_F32 = 0,
  FMSTACK_BF16 = 1,
  FMSTACK_F16 = 2,
  FMSTACK_I64 = 3,
  FMSTACK_I32 = 4,
  FMSTACK_U8 = 5
} fmstack_dtype;

/* One tensor, or elements [begin, begin + nbytes / dtype size) of its flat
 * row-major form: a rank may save only its part of a replicated or sharded
 * tensor, and restore any range (another world size reads the same files).
 * For save, data is read during fmstack_ckpt_save only (for a live save,
 * until fmstack_ckpt_release returns); for restore, it is written. */
typedef struct {
  const char* name;
  int32_t dtype; /* fmstack_dtype */
  int32_t ndim;  /* at most 8 */
  const int64_t* shape;
  int64_t begin;
  void* data;
  int64_t nbytes;
} fmstack_tensor;

/* ------------------------------------------------------------ checkpoints */

typedef struct fmstack_ckpt fmstack_ckpt;

typedef struct {
  const char* dir;               /* the first (fast) tier: a local or shared directory */
  const char* shared_dir;        /* optional second tier, drained from the first; NULL for none */
  int32_t rank, world;           /* this process's place among the ranks that save together */
  int32_t keep;                  /* committed steps kept per tier; 0 = 3 */
  int64_t pool_bytes;            /* staging pool; 0 = one whole state */
  double commit_timeout_seconds; /* rank 0 waiting for the others' parts; 0 = 600 */
} fmstack_ckpt_options;

/* NULL on failure, with the reason in err (always NUL-terminated). */
fmstack_ckpt* fmstack_ckpt_open(const fmstack_ckpt_options* options, char* err, size_t err_len);
/* Waits for saves in flight (their errors are lost: call _wait first to see
 * them), then frees the handle. NULL is allowed. */
void fmstack_ckpt_close(fmstack_ckpt* ckpt);
const char* fmstack_ckpt_error(const fmstack_ckpt* ckpt);

/* Copies the tensors into the staging pool and returns: the only time the
 * caller waits. Writing, checksums and the commit happen on the engine's
 * threads. meta_json (may be NULL) is a JSON value kept in the manifest, for
 * what is not a tensor (counters, the structure of a state dict). Every rank
 * of `world` must save the same step. blocking_seconds may be NULL. */
int fmstack_ckpt_save(fmstack_ckpt* ckpt, int64_t step, const fmstack_tensor* tensors, size_t n,
                      const char* meta_json, double* blocking_seconds);
/* A live save (since version 2): as fmstack_ckpt_save, but nothing is
 * copied and it returns at once. The engine's writer reads the tensors from
 * the caller's memory while the caller goes on (a forward and backward
 * pass), so they must not change until fmstack_ckpt_release returns: call
 * it before anything writes them (the optimizer step). The next save, a
 * restore and fmstack_ckpt_close release a pending live save first. */
int fmstack_ckpt_save_live(fmstack_ckpt* ckpt, int64_t step, const fmstack_tensor* tensors,
                           size_t n, const char* meta_json, double* blocking_seconds);
/* Ends a pending live save's reads of the caller's memory: copies what the
 * writer has not reached into the staging pool and waits for the writes
 * still reading it (at most the engine's write timeout; past it the save is
 * abandoned and this fails naming it). Without a live save pending it
 * returns at once. seconds (may be NULL): how long it took. */
int fmstack_ckpt_release(fmstack_ckpt* ckpt, double* seconds);
/* Waits until every save so far is committed on the first tier. */
int fmstack_ckpt_wait(fmstack_ckpt* ckpt);
/* The newest committed step: 1 and *step set, 0 when there is none, -1 on error. */
int fmstack_ckpt_latest(fmstack_ckpt* ckpt, int64_t* step);
/* The manifest of a committed step as JSON: {"step", "world", "meta", "tensors":
 * {name: {"dtype", "shape"}}}. Returns its length; writes it (NUL-terminated)
 * when it fits in len bytes, so a first call with len 0 sizes the buffer.
 * -1 on error. */
int64_t fmstack_ckpt_manifest(fmstack_ckpt* ckpt, int64_t step, char* out, size_t len);
/* Reads the targets from the newest valid copy of a step <= max_step (-1:
 * any), verifying every chunk. Returns 1 with *step set, 0 when no valid
 * copy exists, -1 on error (a target that names a tensor, dtype or range the
 * checkpoint does not have; the targets' contents are then undefined). */
int fmstack_ckpt_restore(fmstack_ckpt* ckpt, int64_t max_step, const fmstack_tensor* targets,
                         size_t n, int64_t* step);

/* ------------------------------------------------------- supervised runs */

/* Under `fmstack run`: heartbeats from a thread of its own, and the marks
 * the supervisor books in the goodput ledger. Outside a run every call
 * succeeds and does nothing (fmstack_worker_active says which). */
typedef struct fmstack_worker fmstack_worker;

fmstack_worker* fmstack_worker_open(int32_t heartbeat_ms, char* err, size_t err_len);
void fmstack_worker_close(fmstack_worker* worker);
int fmstack_worker_active(const fmstack_worker* worker);
/* What the program is doing now ("step", "checkpoint", "restore", ...). */
void fmstack_worker_progress(fmstack_worker* worker, int64_t step, const char* phase);
/* A finished optimizer step and its wall time: productive time in goodput. */
void fmstack_worker_step(fmstack_worker* worker, int64_t step, double seconds, int64_t tokens);
/* A checkpoint saved (the time the program was blocked by it). */
void fmstack_worker_checkpoint(fmstack_worker* worker, int64_t step, double blocking_seconds);
/* State restored at the start of an attempt (steps after it are trained again). */
void fmstack_worker_restored(fmstack_worker* worker, int64_t step, double seconds);

#if defined(FMSTACK_C_BUILD) && defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* FMSTACK_C_API_H */
