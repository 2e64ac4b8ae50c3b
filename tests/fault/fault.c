/*
 * tests/fault/fault.c - a fault-injection shim, loaded with LD_PRELOAD by
 * the fault driver (fault_driver.c). Once armed (dvar_fault_arm), it counts
 * the calls a program makes to open, openat, read, pread, write, pwrite,
 * pwritev, fsync, fdatasync, rename, renameat, renameat2, mkdir, unlink,
 * unlinkat, rmdir, ftruncate and close, and makes call number `at` fail:
 * with EIO, ENOSPC or EDQUOT (reads: EIO only), short (a write: half the
 * bytes, then the next write fails with ENOSPC, as a full disk does; a
 * read: half the bytes, as a network file system may give), partial (a
 * write: half the bytes, the next writes whole, as a signal that came
 * after some bytes moved), interrupted (EINTR before any byte moved, as a
 * signal does), or by ending the process right there (_exit, as a crash).
 * Short and interrupted apply to reads and writes only, partial to writes
 * only; a kind that does not apply to the call leaves it alone (no fault).
 * Out of memory (ENOMEM) counts the allocations instead (malloc, calloc,
 * realloc, the aligned ones; glibc's own allocations, and C++'s new, come
 * through them too) and makes allocation number `at` return NULL; the
 * blocks allocated while armed and not freed by the disarm are counted,
 * with where each was allocated, for the driver to find leaks. With a scope
 * (dvar_fault_scope), only calls on paths under it, and on descriptors
 * opened there, are counted and failed: a program's other files (OpenMPI's
 * shared memory, its pipes) are never touched, and the count does not
 * depend on them. Every counted call is logged (dvar_fault_log), for the
 * driver to tell a save's phases apart and to say what it failed.
 * A program that does not call the shim (the dvar command) is put under
 * it by the environment: DVAR_FAULT_ALLOC_AT=k fails its k-th allocation
 * from main on (0: counts them), DVAR_FAULT_COUNT names a file that gets
 * the count at exit (cli_alloc.py), DVAR_FAULT_ALLOC_FROM=name counts
 * only the allocations made by a loaded object whose path holds name (an
 * interpreter's own are then left alone: py_alloc_ops.py), outside the
 * initializers of a library being loaded.
 * Test-only: never linked into libdvar.
 */
#include <dlfcn.h>
#include <execinfo.h>
#include <limits.h>
#include <link.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fault.h"

static atomic_int armed;
static atomic_long calls;
static long fail_at;  /* 0: count only */
static int kind;
static atomic_int hit;   /* the fault happened */
static atomic_int disk_full; /* after a short write: later writes fail */
static char hit_what[64];

#define MAX_FDS 4096
#define MAX_LOG 8192
#define LOG_BYTES 200
static char scope[PATH_MAX];    /* "": every call counts */
static size_t scope_len;
static atomic_char fd_in[MAX_FDS];       /* opened while armed, in scope */
#define FD_PATH_BYTES 512
static char fd_path[MAX_FDS][FD_PATH_BYTES]; /* its path (cut short: for the log) */
static char call_log[MAX_LOG][LOG_BYTES]; /* "what path" of counted call n at n - 1 */

/* Count only calls on paths under prefix (absolute; NULL: every call). */
void dvar_fault_scope(const char *prefix)
{
	snprintf(scope, sizeof scope, "%s", prefix ? prefix : "");
	scope_len = strlen(scope);
	while (scope_len > 1 && scope[scope_len - 1] == '/')
		scope[--scope_len] = '\0';
}

/* What counted call n (1-based) was, "what path"; NULL past the log. */
const char *dvar_fault_log(long n)
{
	return n >= 1 && n <= atomic_load(&calls) && n <= MAX_LOG ? call_log[n - 1] : NULL;
}

/* ---------------------------------------------------------------- allocations */

void *__libc_malloc(size_t n);
void *__libc_calloc(size_t k, size_t n);
void *__libc_realloc(void *p, size_t n);
void __libc_free(void *p);
void *__libc_memalign(size_t align, size_t n);

/* The blocks allocated while armed and not yet freed: an open-addressing
 * set of pointers (TOMB: a freed slot), each with where it was allocated. */
#define LIVE_SLOTS (1u << 18)
#define TOMB ((void *)1)
static void *live_p[LIVE_SLOTS];
static void *live_at[LIVE_SLOTS];
static atomic_long live_n;
static int live_full; /* the set overflowed: no leak can be told */
static atomic_flag live_lock = ATOMIC_FLAG_INIT;
static __thread int alloc_paused; /* the driver's own, or the shim's */

/* Where the failed allocation was made: shared with the parent of a
 * child that dies of it (mapped before any fork). */
#define FRAMES 24
struct failed_alloc {
	int depth;
	void *frames[FRAMES];
};
static struct failed_alloc *failed;

__attribute__((constructor)) static void alloc_init(void)
{
	void *f[2];
	failed = mmap(NULL, sizeof *failed, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (failed == MAP_FAILED)
		failed = NULL;
	alloc_paused++;
	backtrace(f, 2); /* loads the unwinder now, not inside a failing malloc */
	alloc_paused--;
}

static size_t slot_of(const void *p)
{
	return (size_t)(((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull >> 46) & (LIVE_SLOTS - 1);
}

static void lock(void)
{
	while (atomic_flag_test_and_set_explicit(&live_lock, memory_order_acquire))
		;
}

static void unlock(void)
{
	atomic_flag_clear_explicit(&live_lock, memory_order_release);
}

static void live_clear(void)
{
	lock();
	memset(live_p, 0, sizeof live_p);
	live_n = 0;
	live_full = 0;
	if (failed)
		failed->depth = 0;
	unlock();
}

static void live_add(void *p, void *at)
{
	lock();
	if (live_n >= (long)(LIVE_SLOTS / 4 * 3)) {
		live_full = 1;
	} else {
		size_t i = slot_of(p);
		while (live_p[i] && live_p[i] != TOMB)
			i = (i + 1) & (LIVE_SLOTS - 1);
		live_p[i] = p;
		live_at[i] = at;
		live_n++;
	}
	unlock();
}

/* 1 when p was allocated while armed (it is then forgotten). */
static int live_remove(void *p)
{
	int found = 0;
	lock();
	for (size_t i = slot_of(p); live_p[i]; i = (i + 1) & (LIVE_SLOTS - 1))
		if (live_p[i] == p) {
			live_p[i] = TOMB;
			live_n--;
			found = 1;
			break;
		}
	unlock();
	return found;
}

/* DVAR_FAULT_ALLOC_FROM=name: only the allocations made by code of a
 * loaded object whose path holds name count (libdvar's own, say, not the
 * interpreter's or MPI's around it); its code's address ranges, found once
 * it is loaded (a program may load it late, as Python does). */
#define FROM_RANGES 8
static const char *from_name;
/* Loading a library (dlopen) on this thread: its initializers' allocations
 * do not count (the CUDA runtime linked into libdvar crashes when one of
 * its own fails, and it is not libdvar's code). */
static __thread int loading;
static uintptr_t from_lo[FROM_RANGES], from_hi[FROM_RANGES];
static atomic_int from_n;

static int from_phdr(struct dl_phdr_info *info, size_t size, void *ud)
{
	int n = 0;
	(void)size;
	(void)ud;
	if (!info->dlpi_name || !strstr(info->dlpi_name, from_name))
		return 0;
	for (int i = 0; i < info->dlpi_phnum && n < FROM_RANGES; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
			from_lo[n] = info->dlpi_addr + ph->p_vaddr;
			from_hi[n++] = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
		}
	}
	atomic_store(&from_n, n);
	return 1;
}

/* Whether an allocation made at address at counts. */
static int counts_from(const void *at)
{
	if (!from_name)
		return 1;
	if (loading)
		return 0;
	if (!atomic_load(&from_n)) {
		/* Not seen yet: look it up only once the loader lists it. */
		int listed = 0;
		for (const struct link_map *m = _r_debug.r_map; m && !listed; m = m->l_next)
			listed = m->l_name && strstr(m->l_name, from_name) != NULL;
		if (!listed)
			return 0;
		alloc_paused++;
		dl_iterate_phdr(from_phdr, NULL);
		alloc_paused--;
	}
	for (int i = 0; i < atomic_load(&from_n); i++)
		if ((uintptr_t)at >= from_lo[i] && (uintptr_t)at < from_hi[i])
			return 1;
	return 0;
}

void *dlopen(const char *file, int mode)
{
	static void *(*real)(const char *, int);
	if (!real)
		real = (void *(*)(const char *, int))dlsym(RTLD_NEXT, "dlopen");
	loading++;
	void *h = real(file, mode);
	loading--;
	return h;
}

/* An allocation made at address at: 1 when it must fail (armed for
 * ENOMEM, counted, and its turn). */
static int alloc_fails(const void *at)
{
	if (!atomic_load(&armed) || kind != FAULT_ENOMEM || alloc_paused || !counts_from(at))
		return 0;
	long n = atomic_fetch_add(&calls, 1) + 1;
	if (fail_at == 0 || n != fail_at)
		return 0;
	atomic_store(&hit, 1);
	snprintf(hit_what, sizeof hit_what, "malloc");
	if (failed) {
		alloc_paused++;
		failed->depth = backtrace(failed->frames, FRAMES);
		alloc_paused--;
	}
	errno = ENOMEM;
	return 1;
}

/* A block just allocated at the caller's address: tracked while armed. */
static void *allocated(void *p, void *at)
{
	if (p && atomic_load(&armed) && kind == FAULT_ENOMEM && !alloc_paused)
		live_add(p, at);
	return p;
}

void *malloc(size_t n)
{
	void *at = __builtin_return_address(0);
	return alloc_fails(at) ? NULL : allocated(__libc_malloc(n), at);
}

void *calloc(size_t k, size_t n)
{
	void *at = __builtin_return_address(0);
	return alloc_fails(at) ? NULL : allocated(__libc_calloc(k, n), at);
}

void free(void *p)
{
	if (p && live_n)
		live_remove(p);
	__libc_free(p);
}

void *realloc(void *p, size_t n)
{
	void *at = __builtin_return_address(0);
	if (!p)
		return alloc_fails(at) ? NULL : allocated(__libc_malloc(n), at);
	if (n == 0) {
		free(p);
		return NULL;
	}
	if (alloc_fails(at))
		return NULL;
	/* A block allocated before arming and grown while armed is not new. */
	int was_live = live_n && live_remove(p);
	void *q = __libc_realloc(p, n);
	if (!q) {
		if (was_live)
			live_add(p, at);
		return NULL;
	}
	if (was_live)
		live_add(q, at);
	return q;
}

static void *memalign_at(size_t align, size_t n, void *at)
{
	return alloc_fails(at) ? NULL : allocated(__libc_memalign(align, n), at);
}

void *memalign(size_t align, size_t n)
{
	return memalign_at(align, n, __builtin_return_address(0));
}

void *aligned_alloc(size_t align, size_t n)
{
	return memalign_at(align, n, __builtin_return_address(0));
}

int posix_memalign(void **out, size_t align, size_t n)
{
	if (align % sizeof(void *) != 0 || (align & (align - 1)) != 0)
		return EINVAL;
	void *at = __builtin_return_address(0);
	if (alloc_fails(at))
		return ENOMEM;
	void *p = allocated(__libc_memalign(align, n), at);
	if (!p)
		return ENOMEM;
	*out = p;
	return 0;
}

/* The driver's own allocations (on/off, nesting): never failed nor tracked. */
void dvar_fault_pause(int on)
{
	alloc_paused += on ? 1 : -1;
}

/* After a disarm: how many blocks allocated while armed are still live
 * (-1: too many to track), and where the k-th of them was allocated. */
long dvar_fault_live(void)
{
	return live_full ? -1 : live_n;
}

void *dvar_fault_live_at(long k)
{
	for (size_t i = 0; i < LIVE_SLOTS; i++)
		if (live_p[i] && live_p[i] != TOMB && k-- == 0)
			return live_at[i];
	return NULL;
}

/* Where the failed allocation of the last trial was made: its frames. */
int dvar_fault_failed_frames(void ***frames)
{
	*frames = failed ? failed->frames : NULL;
	return failed ? failed->depth : 0;
}

/* Arm (at >= 1: fail that call; 0 or -1: count), or disarm (on = 0). */
void dvar_fault_arm(int on, long at, int fault_kind)
{
	if (!on) {
		/* The count, the hit and the log stay, to be read. */
		atomic_store(&armed, 0);
		return;
	}
	atomic_store(&calls, 0);
	atomic_store(&hit, 0);
	atomic_store(&disk_full, 0);
	fail_at = at;
	kind = fault_kind;
	live_clear();
	atomic_store(&armed, 1);
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

/* path made absolute (relative to dirfd's, or the working directory's)
 * into buf; "" when it cannot be told. */
static const char *absolute(int dirfd, const char *path, char *buf, size_t cap)
{
	char cwd[PATH_MAX];
	const char *dir = cwd;

	if (!path)
		return "";
	if (path[0] == '/')
		return path;
	if (dirfd == AT_FDCWD) {
		if (!getcwd(cwd, sizeof cwd))
			return "";
	} else if (dirfd >= 0 && dirfd < MAX_FDS && atomic_load(&fd_in[dirfd])) {
		dir = fd_path[dirfd];
	} else {
		return "";
	}
	if ((size_t)snprintf(buf, cap, "%s/%s", dir, path) >= cap)
		return "";
	return buf;
}

static int under_scope(const char *abs)
{
	return scope_len == 0 ||
	       (strncmp(abs, scope, scope_len) == 0 && (abs[scope_len] == '/' || abs[scope_len] == '\0'));
}

/* A call on a path: counted (1) when armed and in scope; *abs gets the path.
 * /proc/self/fd/N (a file reopened, as for O_DIRECT) is N's file. */
static int path_counts(int dirfd, const char *path, char *buf, size_t cap, const char **abs)
{
	static const char self[] = "/proc/self/fd/";
	char *end;
	*abs = "";
	if (!atomic_load(&armed))
		return 0;
	if (path && strncmp(path, self, sizeof self - 1) == 0) {
		long fd = strtol(path + sizeof self - 1, &end, 10);
		if (*end == '\0' && fd >= 0 && fd < MAX_FDS && atomic_load(&fd_in[fd])) {
			*abs = fd_path[fd];
			return 1;
		}
	}
	*abs = absolute(dirfd, path, buf, cap);
	return under_scope(*abs);
}

/* A call on a descriptor: counted when it was opened in scope while armed
 * (without a scope, every call is). */
static int fd_counts(int fd, const char **path)
{
	int in = fd >= 0 && fd < MAX_FDS && atomic_load(&fd_in[fd]);
	*path = in ? fd_path[fd] : "";
	return atomic_load(&armed) && (in || scope_len == 0);
}

/* After an open that counted: its descriptor is in scope. */
static void opened(int fd, const char *abs)
{
	if (fd < 0 || fd >= MAX_FDS)
		return;
	snprintf(fd_path[fd], FD_PATH_BYTES, "%.*s", FD_PATH_BYTES - 1, abs);
	atomic_store(&fd_in[fd], 1);
}

/* The calls decide() tells apart. */
enum { OTHER, WRITES, READS };

/* What this call should do: 0 go on; -1 fail with errno set; 1 move half
 * the bytes. */
static int decide(const char *what, const char *path, int family)
{
	long n;
	if (!atomic_load(&armed) || kind == FAULT_ENOMEM)
		return 0;
	if (family == WRITES && atomic_load(&disk_full)) {
		errno = ENOSPC;
		return -1;
	}
	n = atomic_fetch_add(&calls, 1) + 1;
	if (n <= MAX_LOG)
		snprintf(call_log[n - 1], LOG_BYTES, "%s %.*s", what, LOG_BYTES - 16, path);
	if (fail_at == 0 || n != fail_at)
		return 0;
	if (((kind == FAULT_EINTR || kind == FAULT_SHORT) && family == OTHER) ||
	    ((kind == FAULT_ENOSPC || kind == FAULT_EDQUOT) && family == READS) ||
	    (kind == FAULT_PARTIAL && family != WRITES))
		return 0;
	atomic_store(&hit, 1);
	snprintf(hit_what, sizeof hit_what, "%s", what);
	switch (kind) {
	case FAULT_CRASH:
		_exit(77);
	case FAULT_SHORT:
		if (family == WRITES)
			atomic_store(&disk_full, 1);
		return 1;
	case FAULT_PARTIAL: return 1;
	case FAULT_EINTR: errno = EINTR; return -1;
	case FAULT_ENOSPC: errno = ENOSPC; return -1;
	case FAULT_EDQUOT: errno = EDQUOT; return -1;
	default: errno = EIO; return -1;
	}
}

#define REAL(name, ret, ...) \
	static ret (*real)(__VA_ARGS__); \
	if (!real) \
		real = (ret (*)(__VA_ARGS__))dlsym(RTLD_NEXT, name)

/* The open family: counted when its path is in scope. */
#define OPEN_BODY(name, dirfd, ...) \
	mode_t mode = 0; \
	char buf[PATH_MAX]; \
	const char *abs; \
	int fd; \
	if (flags & (O_CREAT | O_TMPFILE)) { \
		va_list ap; \
		va_start(ap, flags); \
		mode = va_arg(ap, mode_t); \
		va_end(ap); \
	} \
	if (!path_counts(dirfd, path, buf, sizeof buf, &abs)) \
		return real(__VA_ARGS__, mode); \
	if (decide(name, abs, OTHER)) \
		return -1; \
	fd = real(__VA_ARGS__, mode); \
	opened(fd, abs); \
	return fd

int open(const char *path, int flags, ...)
{
	REAL("open", int, const char *, int, ...);
	OPEN_BODY("open", AT_FDCWD, path, flags);
}

int open64(const char *path, int flags, ...)
{
	REAL("open64", int, const char *, int, ...);
	OPEN_BODY("open", AT_FDCWD, path, flags);
}

int openat(int dirfd, const char *path, int flags, ...)
{
	REAL("openat", int, int, const char *, int, ...);
	OPEN_BODY("openat", dirfd, dirfd, path, flags);
}

/* A call on a descriptor: fails when counted and chosen. */
#define FD_CALL(name, family) \
	const char *where; \
	int d = fd_counts(fd, &where) ? decide(name, where, family) : 0; \
	if (d < 0) \
		return -1

/* What a short call of n bytes moves: half, in whole pages when there are
 * two or more, as a device moves them (O_DIRECT takes only aligned
 * lengths); never 0, which a read takes for the end. */
static size_t short_len(size_t n)
{
	return n >= 8192 ? n / 2 / 4096 * 4096 : (n + 1) / 2;
}

/* A short read of got bytes of n: the whole read is made (O_DIRECT takes
 * only aligned lengths) and a short one's bytes returned. */
static ssize_t short_read(ssize_t got, size_t n)
{
	return got > (ssize_t)short_len(n) ? (ssize_t)short_len(n) : got;
}

ssize_t read(int fd, void *buf, size_t n)
{
	REAL("read", ssize_t, int, void *, size_t);
	FD_CALL("read", READS);
	ssize_t got = real(fd, buf, n);
	if (d && got > 0) {
		/* What read() did not return, it must not have consumed. */
		ssize_t keep = short_read(got, n);
		if (lseek(fd, keep - got, SEEK_CUR) < 0)
			return got;
		return keep;
	}
	return got;
}

ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
	REAL("pread", ssize_t, int, void *, size_t, off_t);
	FD_CALL("pread", READS);
	ssize_t got = real(fd, buf, n, off);
	return d && got > 0 ? short_read(got, n) : got;
}

ssize_t pread64(int fd, void *buf, size_t n, off_t off)
{
	REAL("pread64", ssize_t, int, void *, size_t, off_t);
	FD_CALL("pread", READS);
	ssize_t got = real(fd, buf, n, off);
	return d && got > 0 ? short_read(got, n) : got;
}

ssize_t write(int fd, const void *buf, size_t n)
{
	REAL("write", ssize_t, int, const void *, size_t);
	FD_CALL("write", WRITES);
	return real(fd, buf, d ? short_len(n) : n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	REAL("pwrite", ssize_t, int, const void *, size_t, off_t);
	FD_CALL("pwrite", WRITES);
	return real(fd, buf, d ? short_len(n) : n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
	REAL("pwrite64", ssize_t, int, const void *, size_t, off_t);
	FD_CALL("pwrite", WRITES);
	return real(fd, buf, d ? short_len(n) : n, off);
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
	REAL("pwritev", ssize_t, int, const struct iovec *, int, off_t);
	FD_CALL("pwritev", WRITES);
	if (d && cnt > 0) {
		struct iovec half = { iov[0].iov_base, short_len(iov[0].iov_len) };
		return real(fd, &half, 1, off);
	}
	return real(fd, iov, cnt, off);
}

int fsync(int fd)
{
	REAL("fsync", int, int);
	FD_CALL("fsync", OTHER);
	return real(fd);
}

int fdatasync(int fd)
{
	REAL("fdatasync", int, int);
	FD_CALL("fdatasync", OTHER);
	return real(fd);
}

int ftruncate(int fd, off_t len)
{
	REAL("ftruncate", int, int, off_t);
	FD_CALL("ftruncate", OTHER);
	return real(fd, len);
}

/* A call on one or two paths: fails when counted and chosen. */
#define PATH_CALL(name, da, a, db, b) \
	char buf_a[PATH_MAX], buf_b[PATH_MAX]; \
	const char *abs_a, *abs_b = ""; \
	int counts = path_counts(da, a, buf_a, sizeof buf_a, &abs_a); \
	if (b) \
		counts |= path_counts(db, b, buf_b, sizeof buf_b, &abs_b); \
	if (counts && decide(name, abs_a[0] ? abs_a : abs_b, OTHER)) \
		return -1

int rename(const char *a, const char *b)
{
	REAL("rename", int, const char *, const char *);
	PATH_CALL("rename", AT_FDCWD, a, AT_FDCWD, b);
	return real(a, b);
}

int renameat(int da, const char *a, int db, const char *b)
{
	REAL("renameat", int, int, const char *, int, const char *);
	PATH_CALL("renameat", da, a, db, b);
	return real(da, a, db, b);
}

int renameat2(int da, const char *a, int db, const char *b, unsigned int flags)
{
	REAL("renameat2", int, int, const char *, int, const char *, unsigned int);
	PATH_CALL("renameat2", da, a, db, b);
	return real(da, a, db, b, flags);
}

int mkdir(const char *path, mode_t mode)
{
	REAL("mkdir", int, const char *, mode_t);
	PATH_CALL("mkdir", AT_FDCWD, path, AT_FDCWD, (const char *)NULL);
	return real(path, mode);
}

int unlink(const char *path)
{
	REAL("unlink", int, const char *);
	PATH_CALL("unlink", AT_FDCWD, path, AT_FDCWD, (const char *)NULL);
	return real(path);
}

int unlinkat(int dirfd, const char *path, int flags)
{
	REAL("unlinkat", int, int, const char *, int);
	PATH_CALL("unlinkat", dirfd, path, AT_FDCWD, (const char *)NULL);
	return real(dirfd, path, flags);
}

int rmdir(const char *path)
{
	REAL("rmdir", int, const char *);
	PATH_CALL("rmdir", AT_FDCWD, path, AT_FDCWD, (const char *)NULL);
	return real(path);
}

int close(int fd)
{
	REAL("close", int, int);
	const char *where;
	int counts = fd_counts(fd, &where);
	/* Out of scope before the number can be reused. */
	int d = counts ? decide("close", where, OTHER) : 0, e = errno;
	if (fd >= 0 && fd < MAX_FDS)
		atomic_store(&fd_in[fd], 0);
	/* A failed close still closes the descriptor, as Linux's does. */
	int rc = real(fd);
	if (d) {
		errno = e;
		return -1;
	}
	return rc;
}

/* ---------------------------------------------------------------- programs */

typedef int (*main_fn)(int, char **, char **);
static main_fn program_main;

static void write_count(void)
{
	const char *path = getenv("DVAR_FAULT_COUNT");
	FILE *f;
	atomic_store(&armed, 0);
	/* Appended: each process of a job (mpirun's workers) adds its own. */
	if (path && (f = fopen(path, "a"))) {
		fprintf(f, "%ld\n", atomic_load(&calls));
		fclose(f);
	}
}

/* main, with the allocations from here on counted and the k-th failed. */
static int armed_main(int argc, char **argv, char **envp)
{
	alloc_paused++;
	atexit(write_count);
	alloc_paused--;
	from_name = getenv("DVAR_FAULT_ALLOC_FROM");
	dvar_fault_arm(1, atol(getenv("DVAR_FAULT_ALLOC_AT")), FAULT_ENOMEM);
	return program_main(argc, argv, envp);
}

int __libc_start_main(main_fn main, int argc, char **argv, void (*init)(void), void (*fini)(void),
                      void (*rtld_fini)(void), void *stack_end)
{
	typedef int (*start_fn)(main_fn, int, char **, void (*)(void), void (*)(void), void (*)(void),
	                        void *);
	start_fn real = (start_fn)dlsym(RTLD_NEXT, "__libc_start_main");
	if (getenv("DVAR_FAULT_ALLOC_AT")) {
		program_main = main;
		main = armed_main;
	}
	return real(main, argc, argv, init, fini, rtld_fini, stack_end);
}
