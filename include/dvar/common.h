/*
 * dvar/common.h - export macros, status codes, the thread-local error record
 * and the callback types shared by every dvar module.
 *
 * Every dvar function that can fail returns an int: DVAR_OK (0) or one of the
 * negative dvar_code values; that status is how a caller tells failure from
 * success. The details of the most recent failure on the calling thread
 * (what failed, on which file / variable / slice) are kept in a
 * thread-local record that dvar_error_last() returns. Successful calls leave
 * the record alone (as libgit2's git_error_last), so read it only after a
 * call returned an error.
 *
 * Lengths: the byte length of memory the caller passes or receives (a
 * buffer's size, a blob's length) and the length of an array in memory are
 * size_t; sizes of data as a shape or a file describes it (element and byte
 * counts of a tensor, file sizes and offsets) are uint64_t.
 *
 * Memory the library hands out for the caller to release (a blob, a string)
 * is released with dvar_free, never free(): the library may use another
 * allocator than the program. Objects have their own _free functions.
 */
#ifndef DVAR_COMMON_H
#define DVAR_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define DVAR_BEGIN_DECL extern "C" {
#define DVAR_END_DECL }
#else
#define DVAR_BEGIN_DECL
#define DVAR_END_DECL
#endif

#if defined(__GNUC__)
#define DVAR_EXTERN(type) extern __attribute__((visibility("default"))) type
#else
#define DVAR_EXTERN(type) extern type
#endif

DVAR_BEGIN_DECL

#define DVAR_VERSION_MAJOR 0
#define DVAR_VERSION_MINOR 1
#define DVAR_VERSION_PATCH 0
#define DVAR_VERSION_STRING "0.1.0"

/** Status codes. Zero is success; every error is negative. */
typedef enum {
	DVAR_OK = 0,
	DVAR_ERROR = -1,     /**< generic failure */
	DVAR_ENOTFOUND = -2, /**< a file, checkpoint or variable does not exist */
	DVAR_EEXISTS = -3,   /**< the target already exists */
	DVAR_EINVAL = -4,    /**< a bad argument: shape, dtype, name, slice, option */
	DVAR_ENOMEM = -5,    /**< out of memory */
	DVAR_EIO = -6,       /**< an operating-system I/O error */
	DVAR_ECORRUPT = -7,  /**< on-disk data failed a check (checksum, size, encoding) */
	DVAR_EVERSION = -8,  /**< written by a newer, incompatible format version */
	DVAR_ESHAPE = -9,    /**< shapes or slices do not fit together */
	DVAR_ECOMM = -10,    /**< a collective or a peer worker failed */
	DVAR_EDEVICE = -11,  /**< an accelerator call failed */
	DVAR_ENOTSUPP = -12, /**< the feature is not compiled in or not supported */
	DVAR_EMISMATCH = -13, /**< copies that must be equal differ (mirrored replicas) */
	DVAR_ECANCELED = -14, /**< the caller cancelled the operation (dvar_callbacks.cancel) */
	DVAR_EBUSY = -15      /**< another process holds the resource (a root being saved into) */
} dvar_code;

/** The most recent error on this thread. message is never NULL ("" when
 *  there was none, or after dvar_error_clear). */
typedef struct {
	int code;
	const char *message;
} dvar_error;

/**
 * The most recent error raised on the calling thread. Not cleared by
 * successful calls: after a call returned DVAR_OK it may still describe an
 * older failure, so it says why a call failed but never whether one did.
 * @return never NULL; valid until the next dvar call on this thread.
 */
DVAR_EXTERN(const dvar_error *) dvar_error_last(void);

/** Empty the calling thread's error record (code DVAR_OK, message ""). */
DVAR_EXTERN(void) dvar_error_clear(void);

/** Release memory the library handed out (see each function). NULL is a no-op. */
DVAR_EXTERN(void) dvar_free(void *p);

/** A static, human-readable name for a status code ("I/O error"). */
DVAR_EXTERN(const char *) dvar_strerror(int code);

/** The library's version string ("0.1.0"). */
DVAR_EXTERN(const char *) dvar_version(void);

/**
 * sizeof the public struct named type_name ("dvar_shape", "dvar_var_info",
 * "dvar_export_options", ...) as this library was built, for bindings that
 * mirror the structs (ctypes) to check their layouts against when they load.
 * @return 0 for a name it does not know (or NULL)
 */
DVAR_EXTERN(size_t) dvar_abi_sizeof(const char *type_name);

/**
 * Progress of a long operation: done and total are in bytes (total is 0 when
 * not known in advance, as for a writer). Called from the thread that started
 * the operation: by writers at most about six times per second, by the
 * offline operations (dvar/restore.h) after every piece they copy.
 */
typedef void (*dvar_progress_fn)(void *userdata, uint64_t done, uint64_t total);

DVAR_END_DECL

#endif
