/*
 * format/fsutil.c - the file-system steps a crash-safe checkpoint is made
 * of: positioned reads and writes that finish or fail loudly, fsync of files
 * and directories, rename that never replaces, atomic small-file writes,
 * and the one rule for temporary names (format.h): making, recognising and
 * sweeping them.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "format/format.h"

void (*dvar__fault_hook)(const char *point);

char *dvar_path_join(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *p = malloc(la + lb + 2);
	if (!p)
		return NULL;
	memcpy(p, a, la);
	size_t n = la;
	if (n && p[n - 1] != '/')
		p[n++] = '/';
	memcpy(p + n, b, lb + 1);
	return p;
}

char *dvar_path_parent(const char *path)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		return strdup(".");
	return strndup(path, slash == path ? 1 : (size_t)(slash - path));
}

int dvar_fs_exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

int dvar_fs_is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int dvar_fs_mkdirs(const char *path)
{
	char *p = strdup(path);
	int rc = DVAR_OK;
	if (!p)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	for (char *s = p + 1; ; s++) {
		if (*s != '/' && *s != '\0')
			continue;
		char c = *s;
		*s = '\0';
		if (mkdir(p, 0777) != 0 && errno != EEXIST) {
			rc = dvar_error_set_errno(DVAR_EIO, errno, "create directory '%s'", p);
			break;
		}
		*s = c;
		if (!c)
			break;
	}
	if (rc == DVAR_OK && !dvar_fs_is_dir(path))
		rc = dvar_error_set(DVAR_EIO, "'%s' exists and is not a directory", path);
	free(p);
	return rc;
}

int dvar_fs_fsync_path(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return dvar_error_set_errno(DVAR_EIO, errno, "open '%s' for fsync", path);
	int rc = DVAR_OK;
	if (fsync(fd) != 0)
		rc = dvar_error_set_errno(DVAR_EIO, errno, "fsync '%s'", path);
	close(fd);
	return rc;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st; (void)ftw;
	if ((flag == FTW_DP ? rmdir(path) : unlink(path)) != 0 && errno != ENOENT)
		return dvar_error_set_errno(DVAR_EIO, errno, "remove '%s'", path);
	return 0;
}

int dvar_fs_rmtree(const char *path)
{
	if (!dvar_fs_exists(path))
		return DVAR_OK;
	int rc = nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	if (rc == -1)
		return dvar_error_set_errno(DVAR_EIO, errno, "remove '%s'", path);
	return rc;
}

int dvar_fs_pwrite_all(int fd, const void *buf, size_t len, uint64_t off, const char *what)
{
	const char *p = buf;
	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return dvar_error_set_errno(DVAR_EIO, errno, "write %zu bytes at offset %llu of '%s'",
			                            len, (unsigned long long)off, what);
		}
		if (n == 0) /* nothing written, no error: said as a full disk, not retried forever */
			return dvar_error_set_errno(DVAR_EIO, ENOSPC, "write %zu bytes at offset %llu of '%s'",
			                            len, (unsigned long long)off, what);
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return DVAR_OK;
}

int dvar_fs_pread_all(int fd, void *buf, size_t len, uint64_t off, const char *what)
{
	char *p = buf;
	uint64_t start = off;
	while (len) {
		ssize_t n = pread(fd, p, len, (off_t)off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return dvar_error_set_errno(DVAR_EIO, errno, "read %zu bytes at offset %llu of '%s'",
			                            len, (unsigned long long)off, what);
		}
		if (n == 0)
			return dvar_error_set(DVAR_ECORRUPT, "'%s' is truncated: it ends at byte %llu, "
			                      "reading bytes %llu..%llu", what, (unsigned long long)off,
			                      (unsigned long long)start, (unsigned long long)(off + len));
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return DVAR_OK;
}

int dvar_fs_read_file(const char *path, char **out, size_t *len, size_t max)
{
	*out = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return dvar_error_set_errno(errno == ENOENT ? DVAR_ENOTFOUND : DVAR_EIO, errno,
		                            "open '%s'", path);
	struct stat st;
	int rc = DVAR_OK;
	char *buf = NULL;
	if (fstat(fd, &st) != 0) {
		rc = dvar_error_set_errno(DVAR_EIO, errno, "stat '%s'", path);
		goto done;
	}
	if ((uint64_t)st.st_size > max) {
		rc = dvar_error_set(DVAR_ECORRUPT, "'%s' is %lld bytes, more than the %zu expected",
		                    path, (long long)st.st_size, max);
		goto done;
	}
	if (!(buf = malloc((size_t)st.st_size + 1))) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto done;
	}
	if ((rc = dvar_fs_pread_all(fd, buf, (size_t)st.st_size, 0, path)))
		goto done;
	buf[st.st_size] = '\0';
	*out = buf;
	*len = (size_t)st.st_size;
	buf = NULL;
done:
	free(buf);
	close(fd);
	return rc;
}

int dvar_fs_write_atomic(const char *dir, const char *name, const void *data, size_t len,
                         int sync)
{
	char *final = dvar_path_join(dir, name), *tmp = NULL;
	int fd = -1, rc = DVAR_OK;
	if (!final) {
		rc = dvar_error_set(DVAR_ENOMEM, "out of memory");
		goto done;
	}
	if ((rc = dvar_tmp_name(final, NULL, &tmp)))
		goto done;
	/* Messages name final: the temporary name means nothing to the user. */
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666)) < 0) {
		rc = dvar_error_set_errno(DVAR_EIO, errno, "write '%s'", final);
		goto done;
	}
	if ((rc = dvar_fs_pwrite_all(fd, data, len, 0, final)))
		goto done;
	if (sync && fsync(fd) != 0) {
		rc = dvar_error_set_errno(DVAR_EIO, errno, "fsync '%s'", final);
		goto done;
	}
	close(fd);
	fd = -1;
	DVAR_FAULT_POINT("atomic-before-rename");
	if (rename(tmp, final) != 0) {
		rc = dvar_error_set_errno(DVAR_EIO, errno, "replace '%s'", final);
		goto done;
	}
	rc = sync ? dvar_fs_fsync_path(dir) : DVAR_OK;
done:
	if (fd >= 0)
		close(fd);
	if (rc && tmp)
		unlink(tmp);
	free(tmp);
	free(final);
	return rc;
}

int dvar_fs_rename_noreplace(const char *from, const char *to)
{
	if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
		return DVAR_OK;
	if (errno == EEXIST)
		return dvar_error_set(DVAR_EEXISTS, "'%s' already exists", to);
	if (errno != EINVAL && errno != ENOSYS)
		return dvar_error_set_errno(DVAR_EIO, errno, "rename '%s' to '%s'", from, to);
	/* A file system without RENAME_NOREPLACE: check, then rename (racy, but
	 * rename(2) still refuses a non-empty target directory). */
	if (dvar_fs_exists(to))
		return dvar_error_set(DVAR_EEXISTS, "'%s' already exists", to);
	if (rename(from, to) != 0)
		return dvar_error_set_errno(DVAR_EIO, errno, "rename '%s' to '%s'", from, to);
	return DVAR_OK;
}

uint64_t dvar_fs_dir_bytes(const char *path)
{
	/* Checkpoint directories are flat: sum the regular files one level down. */
	DIR *d = opendir(path);
	uint64_t sum = 0;
	if (!d)
		return 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		struct stat st;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
			sum += (uint64_t)st.st_size;
	}
	closedir(d);
	return sum;
}

/* ---------------------------------------------------------------- temporary names */

/* This host's name as temporary names carry it (format.h). */
static void host_tag(char host[DVAR_TMP_HOST_MAX + 1])
{
	char raw[256] = "";
	if (gethostname(raw, sizeof(raw) - 1) != 0 || !raw[0])
		snprintf(raw, sizeof(raw), "localhost");
	size_t n = 0;
	for (; raw[n] && n < DVAR_TMP_HOST_MAX; n++) {
		char c = raw[n];
		int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		         c == '_' || c == '-';
		host[n] = ok ? c : '_';
	}
	host[n] = '\0';
}

void dvar_tmp_tag(char *tag)
{
	static const char digits[] = "abcdefghijklmnopqrstuvwxyz0123456789";
	static atomic_uint counter;
	unsigned char r[DVAR_TMP_RANDOM];
	char host[DVAR_TMP_HOST_MAX + 1], rnd[DVAR_TMP_RANDOM + 1];
	if (getrandom(r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
		/* No entropy yet: the pid is in the tag already; a counter and the
		 * clock keep this process's tags apart. */
		uint64_t x = ((uint64_t)atomic_fetch_add(&counter, 1) << 40) ^ (uint64_t)time(NULL) ^
		             (uint64_t)clock();
		for (size_t i = 0; i < sizeof(r); i++, x = x * 6364136223846793005ull + 1442695040888963407ull)
			r[i] = (unsigned char)(x >> 56);
	}
	for (size_t i = 0; i < sizeof(r); i++)
		rnd[i] = digits[r[i] % 36];
	rnd[DVAR_TMP_RANDOM] = '\0';
	host_tag(host);
	snprintf(tag, DVAR_TMP_TAG_MAX + 1, "%s-%u-%s", host, (unsigned)getpid(), rnd);
}

int dvar_tmp_name(const char *path, const char *tag, char **out)
{
	char fresh[DVAR_TMP_TAG_MAX + 1];
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	int dir_len = slash ? (int)(slash - path) + 1 : 0;
	if (!tag) {
		dvar_tmp_tag(fresh);
		tag = fresh;
	}
	size_t cap = strlen(path) + strlen(tag) + sizeof(DVAR_TMP_MARK) + 2;
	if (!(*out = malloc(cap)))
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	snprintf(*out, cap, "%.*s.%s" DVAR_TMP_MARK "%s", dir_len, path, base, tag);
	return DVAR_OK;
}

int dvar_tmp_parse(const char *name, dvar_tmp_info *out)
{
	const char *mark = NULL;
	for (const char *m = name; (m = strstr(m, DVAR_TMP_MARK)); m++)
		mark = m;
	if (name[0] != '.' || !mark || mark == name + 1)
		return 0;
	const char *tag = mark + strlen(DVAR_TMP_MARK);
	size_t len = strlen(tag);
	if (!len || len > DVAR_MAX_TOKEN || strspn(tag, DVAR_TOKEN_CHARS) != len)
		return 0;
	memset(out, 0, sizeof(*out));
	out->target_len = (size_t)(mark - name - 1);
	/* <host>-<pid>-<random>, read from the right: host may hold '-'. */
	const char *rnd = strrchr(tag, '-');
	if (!rnd || strlen(rnd + 1) != DVAR_TMP_RANDOM ||
	    strspn(rnd + 1, "abcdefghijklmnopqrstuvwxyz0123456789") != DVAR_TMP_RANDOM)
		return 1;
	const char *pid = rnd;
	while (pid > tag && pid[-1] >= '0' && pid[-1] <= '9')
		pid--;
	size_t host_len = pid > tag + 1 ? (size_t)(pid - 1 - tag) : 0;
	if (pid == rnd || rnd - pid > 10 || !host_len || pid[-1] != '-' || host_len > DVAR_TMP_HOST_MAX)
		return 1;
	memcpy(out->host, tag, host_len);
	out->host[host_len] = '\0';
	out->pid = strtol(pid, NULL, 10);
	if (out->pid <= 0)
		out->host[0] = '\0', out->pid = 0;
	return 1;
}

/* A process that has exited but is not reaped yet still answers kill(): a
 * zombie, for good under a container's first process when that one never
 * reaps its adopted children (mpirun's workers it killed end up there). Its
 * state is Z with one thread left; a main thread that called pthread_exit
 * shows Z too, beside the threads that still run. */
static int exited(long pid)
{
	char path[32], buf[512];
	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* "pid (comm) state ...": comm may hold ')' itself, so the last one;
	 * num_threads is the 18th field after it. */
	const char *f = strrchr(buf, ')');
	if (!f || f[1] != ' ' || (f[2] != 'Z' && f[2] != 'X'))
		return 0;
	f += 2;
	for (int k = 0; k < 17 && f; k++)
		if ((f = strchr(f, ' ')))
			f++;
	return f && strtol(f, NULL, 10) <= 1;
}

int dvar_tmp_writer_alive(const dvar_tmp_info *t)
{
	char host[DVAR_TMP_HOST_MAX + 1];
	host_tag(host);
	if (t->pid <= 0 || strcmp(t->host, host) != 0)
		return -1;
	if (kill((pid_t)t->pid, 0) != 0 && errno == ESRCH)
		return 0;
	return !exited(t->pid);
}

void dvar_tmp_sweep(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	dvar_error saved = *dvar_error_last();
	char msg[DVAR_ERROR_MESSAGE_MAX];
	snprintf(msg, sizeof(msg), "%s", saved.message);
	struct dirent *e;
	dvar_tmp_info t;
	while ((e = readdir(d))) {
		if (!dvar_tmp_parse(e->d_name, &t) || dvar_tmp_writer_alive(&t) != 0)
			continue;
		char *path = dvar_path_join(dir, e->d_name);
		if (path)
			dvar_fs_rmtree(path);
		free(path);
	}
	closedir(d);
	dvar_error_restore(saved.code, msg);
}
