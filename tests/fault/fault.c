/*
 * tests/fault/fault.c - a fault-injection shim, loaded with LD_PRELOAD by
 * the fault driver (fault_driver.c). Once armed (dvar_fault_arm), it counts
 * the calls a program makes to open, openat, write, pwrite, pwritev, fsync,
 * fdatasync, rename, renameat, renameat2, mkdir, unlink, unlinkat, rmdir,
 * ftruncate and close, and makes call number `at` fail: with EIO, ENOSPC or
 * EDQUOT, as a short write (the write family: half the bytes, then the
 * next call fails with ENOSPC, as a full disk does), or by ending the
 * process right there (_exit, as a crash). Test-only: never linked into
 * libdvar.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

enum { FAULT_EIO, FAULT_ENOSPC, FAULT_EDQUOT, FAULT_SHORT, FAULT_CRASH };

static atomic_int armed;
static atomic_long calls;
static long fail_at;  /* 0: count only */
static int kind;
static atomic_int hit;   /* the fault happened */
static atomic_int disk_full; /* after a short write: later writes fail */
static char hit_what[64];

/* Arm (at >= 1: fail that call; 0: count), or disarm (on = 0). */
void dvar_fault_arm(int on, long at, int fault_kind)
{
	atomic_store(&calls, 0);
	atomic_store(&hit, 0);
	atomic_store(&disk_full, 0);
	fail_at = at;
	kind = fault_kind;
	atomic_store(&armed, on);
}

long dvar_fault_calls(void)
{
	return atomic_load(&calls);
}

/* 1 when the fault was injected, with the call it was injected into. */
int dvar_fault_hit(const char **what)
{
	if (what)
		*what = hit_what;
	return atomic_load(&hit);
}

/* What this call should do: 0 go on; -1 fail with errno set; 1 a short write. */
static int decide(const char *what, int writes)
{
	long n;
	if (!atomic_load(&armed))
		return 0;
	if (writes && atomic_load(&disk_full)) {
		errno = ENOSPC;
		return -1;
	}
	n = atomic_fetch_add(&calls, 1) + 1;
	if (fail_at == 0 || n != fail_at)
		return 0;
	atomic_store(&hit, 1);
	snprintf(hit_what, sizeof hit_what, "%s", what);
	switch (kind) {
	case FAULT_CRASH:
		_exit(77);
	case FAULT_SHORT:
		if (writes) {
			atomic_store(&disk_full, 1);
			return 1;
		}
		errno = ENOSPC;
		return -1;
	case FAULT_ENOSPC: errno = ENOSPC; return -1;
	case FAULT_EDQUOT: errno = EDQUOT; return -1;
	default: errno = EIO; return -1;
	}
}

#define REAL(name, ret, ...) \
	static ret (*real)(__VA_ARGS__); \
	if (!real) \
		real = (ret (*)(__VA_ARGS__))dlsym(RTLD_NEXT, name)

int open(const char *path, int flags, ...)
{
	REAL("open", int, const char *, int, ...);
	mode_t mode = 0;
	if (flags & (O_CREAT | O_TMPFILE)) {
		va_list ap;
		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	if (decide("open", 0))
		return -1;
	return real(path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
	REAL("open64", int, const char *, int, ...);
	mode_t mode = 0;
	if (flags & (O_CREAT | O_TMPFILE)) {
		va_list ap;
		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	if (decide("open", 0))
		return -1;
	return real(path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...)
{
	REAL("openat", int, int, const char *, int, ...);
	mode_t mode = 0;
	if (flags & (O_CREAT | O_TMPFILE)) {
		va_list ap;
		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	if (decide("openat", 0))
		return -1;
	return real(dirfd, path, flags, mode);
}

ssize_t write(int fd, const void *buf, size_t n)
{
	REAL("write", ssize_t, int, const void *, size_t);
	int d = decide("write", 1);
	if (d < 0)
		return -1;
	return real(fd, buf, d ? n / 2 : n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	REAL("pwrite", ssize_t, int, const void *, size_t, off_t);
	int d = decide("pwrite", 1);
	if (d < 0)
		return -1;
	return real(fd, buf, d ? n / 2 : n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
	REAL("pwrite64", ssize_t, int, const void *, size_t, off_t);
	int d = decide("pwrite", 1);
	if (d < 0)
		return -1;
	return real(fd, buf, d ? n / 2 : n, off);
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
	REAL("pwritev", ssize_t, int, const struct iovec *, int, off_t);
	int d = decide("pwritev", 1);
	if (d < 0)
		return -1;
	if (d && cnt > 0) {
		struct iovec half = { iov[0].iov_base, iov[0].iov_len / 2 };
		return real(fd, &half, 1, off);
	}
	return real(fd, iov, cnt, off);
}

int fsync(int fd)
{
	REAL("fsync", int, int);
	if (decide("fsync", 0))
		return -1;
	return real(fd);
}

int fdatasync(int fd)
{
	REAL("fdatasync", int, int);
	if (decide("fdatasync", 0))
		return -1;
	return real(fd);
}

int rename(const char *a, const char *b)
{
	REAL("rename", int, const char *, const char *);
	if (decide("rename", 0))
		return -1;
	return real(a, b);
}

int renameat(int da, const char *a, int db, const char *b)
{
	REAL("renameat", int, int, const char *, int, const char *);
	if (decide("renameat", 0))
		return -1;
	return real(da, a, db, b);
}

int renameat2(int da, const char *a, int db, const char *b, unsigned int flags)
{
	REAL("renameat2", int, int, const char *, int, const char *, unsigned int);
	if (decide("renameat2", 0))
		return -1;
	return real(da, a, db, b, flags);
}

int mkdir(const char *path, mode_t mode)
{
	REAL("mkdir", int, const char *, mode_t);
	if (decide("mkdir", 0))
		return -1;
	return real(path, mode);
}

int unlink(const char *path)
{
	REAL("unlink", int, const char *);
	if (decide("unlink", 0))
		return -1;
	return real(path);
}

int unlinkat(int dirfd, const char *path, int flags)
{
	REAL("unlinkat", int, int, const char *, int);
	if (decide("unlinkat", 0))
		return -1;
	return real(dirfd, path, flags);
}

int rmdir(const char *path)
{
	REAL("rmdir", int, const char *);
	if (decide("rmdir", 0))
		return -1;
	return real(path);
}

int ftruncate(int fd, off_t len)
{
	REAL("ftruncate", int, int, off_t);
	if (decide("ftruncate", 0))
		return -1;
	return real(fd, len);
}

int close(int fd)
{
	REAL("close", int, int);
	/* A failed close still closes the descriptor, as Linux's does. */
	int d = decide("close", 0), e = errno;
	int rc = real(fd);
	if (d) {
		errno = e;
		return -1;
	}
	return rc;
}
