/*
 * restore/npz.c - the zip archives numpy writes as .npz (np.savez: stored
 * members; np.savez_compressed: deflated ones; always with ZIP64 extras, as
 * numpy forces them): the central directory read into a list of members,
 * and one member's bytes streamed through a bounded buffer, inflated with
 * zlib where deflated, and checked against the member's CRC-32 when its
 * last byte is read. Encrypted members, other compression methods and
 * archives split over several disks are DVAR_ENOTSUPP.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "format/format.h"
#include "restore/restore.h"

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_END 0x06054b50u
#define SIG_END64 0x06064b50u
#define SIG_LOCATOR64 0x07064b50u

#define END_BYTES 22u      /* the end of central directory record, without its comment */
#define LOCATOR64_BYTES 20u
#define END64_BYTES 56u
#define CENTRAL_BYTES 46u  /* a central directory entry, without name, extra, comment */
#define LOCAL_BYTES 30u    /* a local header, without name and extra */
#define EXTRA_ZIP64 0x0001u

#define METHOD_STORED 0
#define METHOD_DEFLATED 8
#define FLAG_ENCRYPTED 0x0001u
#define FLAG_STRONG_ENCRYPTION 0x0040u

/* Compressed bytes read at a time. */
#define ZIP_IN_BYTES (64u << 10)

static uint16_t le16(const unsigned char *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const unsigned char *p)
{
	return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

/* ------------------------------------------------------ the directory */

/* Where the central directory is and how many entries it has. */
typedef struct {
	uint64_t offset, bytes, entries;
} central;

/* The ZIP64 end record that the locator before the end record at pos points to. */
static int find_end64(int fd, const char *path, uint64_t pos, central *c)
{
	unsigned char b[END64_BYTES];
	int rc;

	if (pos < LOCATOR64_BYTES ||
	    (rc = dvar_fs_pread_all(fd, b, LOCATOR64_BYTES, pos - LOCATOR64_BYTES, path)) != DVAR_OK ||
	    le32(b) != SIG_LOCATOR64)
		return dvar_error_set(DVAR_ECORRUPT, "'%s': bad .npz archive: its end record asks for "
		                                     "ZIP64 but there is no ZIP64 locator", path);
	if (le32(b + 4) != 0 || le32(b + 16) > 1)
		return dvar_error_set(DVAR_ENOTSUPP, "'%s': archives split over several disks are not "
		                                     "supported", path);
	uint64_t at = le64(b + 8);
	if (at > pos - LOCATOR64_BYTES || pos - LOCATOR64_BYTES - at < END64_BYTES ||
	    (rc = dvar_fs_pread_all(fd, b, END64_BYTES, at, path)) != DVAR_OK || le32(b) != SIG_END64)
		return dvar_error_set(DVAR_ECORRUPT, "'%s': bad .npz archive: its ZIP64 locator points "
		                                     "to no ZIP64 end record", path);
	if (le32(b + 16) != 0 || le32(b + 20) != 0)
		return dvar_error_set(DVAR_ENOTSUPP, "'%s': archives split over several disks are not "
		                                     "supported", path);
	c->entries = le64(b + 32);
	c->bytes = le64(b + 40);
	c->offset = le64(b + 48);
	/* The central directory ends where the ZIP64 end record starts. */
	if (c->offset > at || c->bytes > at - c->offset)
		return dvar_error_set(DVAR_ECORRUPT, "'%s': bad .npz archive: its central directory "
		                                     "lies outside the file", path);
	return DVAR_OK;
}

/* The end of central directory record: the last one, in the file's last 64 KiB + 22 bytes. */
static int find_central(int fd, const char *path, uint64_t size, central *c)
{
	size_t tail = size < END_BYTES + 0xFFFFu ? (size_t)size : END_BYTES + 0xFFFFu;
	unsigned char *b = tail >= END_BYTES ? malloc(tail) : NULL;
	int rc;

	if (tail < END_BYTES)
		return dvar_error_set(DVAR_ECORRUPT, "'%s': bad .npz archive: %" PRIu64 " bytes are "
		                                     "too few for a zip file", path, size);
	if (!b)
		return dvar_error_set(DVAR_ENOMEM, "'%s': out of memory", path);
	if ((rc = dvar_fs_pread_all(fd, b, tail, size - tail, path)) != DVAR_OK) {
		free(b);
		return rc;
	}
	size_t at = tail - END_BYTES + 1;
	while (at-- > 0)
		if (le32(b + at) == SIG_END && at + END_BYTES + le16(b + at + 20) <= tail)
			break;
	if (at == (size_t)-1) {
		free(b);
		return dvar_error_set(DVAR_ECORRUPT, "'%s': bad .npz archive: no end of central "
		                                     "directory record (truncated?)", path);
	}
	const unsigned char *e = b + at;
	uint64_t pos = size - tail + at;
	uint16_t disk = le16(e + 4), cdisk = le16(e + 6);
	c->entries = le16(e + 10);
	c->bytes = le32(e + 12);
	c->offset = le32(e + 16);
	int zip64 = c->entries == 0xFFFFu || c->bytes == 0xFFFFFFFFu || c->offset == 0xFFFFFFFFu;
	free(b);
	if (zip64)
		return find_end64(fd, path, pos, c);
	if (disk != 0 || cdisk != 0)
		return dvar_error_set(DVAR_ENOTSUPP, "'%s': archives split over several disks are not "
		                                     "supported", path);
	if (c->offset > pos || c->bytes > pos - c->offset)
		return dvar_error_set(DVAR_ECORRUPT, "'%s': bad .npz archive: its central directory "
		                                     "lies outside the file", path);
	return DVAR_OK;
}

/* The ZIP64 extra field replaces those 32-bit values that are all ones, in this order. */
static int read_zip64(const char *path, const unsigned char *x, size_t xlen, dvar_zip_member *m,
                      int need_usize, int need_csize, int need_header)
{
	while (xlen >= 4) {
		uint16_t id = le16(x), len = le16(x + 2);
		if ((size_t)len > xlen - 4)
			break;
		if (id == EXTRA_ZIP64) {
			const unsigned char *p = x + 4;
			size_t want = 8u * (size_t)(need_usize + need_csize + need_header);
			if (len < want)
				break;
			if (need_usize) {
				m->usize = le64(p);
				p += 8;
			}
			if (need_csize) {
				m->csize = le64(p);
				p += 8;
			}
			if (need_header)
				m->header = le64(p);
			return DVAR_OK;
		}
		x += 4 + len;
		xlen -= 4 + (size_t)len;
	}
	return dvar_error_set(DVAR_ECORRUPT, "'%s': bad .npz archive: member '%s' lacks the ZIP64 "
	                                     "sizes its directory entry asks for", path, m->name);
}

/* The entry at *p (left bytes of the directory); *p moves past it. */
static int read_entry(const char *path, const unsigned char **p, size_t *left, dvar_zip_member *m)
{
	const unsigned char *e = *p;

	if (*left < CENTRAL_BYTES || le32(e) != SIG_CENTRAL)
		return dvar_error_set(DVAR_ECORRUPT, "'%s': bad .npz archive: a damaged central "
		                                     "directory entry", path);
	size_t nlen = le16(e + 28), xlen = le16(e + 30), clen = le16(e + 32);
	size_t bytes = CENTRAL_BYTES + nlen + xlen + clen;
	if (bytes > *left)
		return dvar_error_set(DVAR_ECORRUPT, "'%s': bad .npz archive: a central directory "
		                                     "entry runs past the directory", path);
	if (memchr(e + CENTRAL_BYTES, '\0', nlen))
		return dvar_error_set(DVAR_ECORRUPT, "'%s': bad .npz archive: a member name holds a NUL",
		                      path);
	if (!(m->name = malloc(nlen + 1)))
		return dvar_error_set(DVAR_ENOMEM, "'%s': out of memory", path);
	memcpy(m->name, e + CENTRAL_BYTES, nlen);
	m->name[nlen] = '\0';
	m->flags = le16(e + 8);
	m->method = le16(e + 10);
	m->crc = le32(e + 16);
	m->csize = le32(e + 20);
	m->usize = le32(e + 24);
	m->header = le32(e + 42);
	int need_usize = m->usize == 0xFFFFFFFFu, need_csize = m->csize == 0xFFFFFFFFu;
	int need_header = m->header == 0xFFFFFFFFu;
	if (need_usize || need_csize || need_header) {
		int rc = read_zip64(path, e + CENTRAL_BYTES + nlen, xlen, m, need_usize, need_csize,
		                    need_header);
		if (rc != DVAR_OK)
			return rc;
	}
	*p += bytes;
	*left -= bytes;
	return DVAR_OK;
}

int dvar_zip_list(int fd, const char *path, uint64_t size, dvar_zip_member **out, size_t *n)
{
	central c = { 0, 0, 0 };
	unsigned char *dir = NULL;
	dvar_zip_member *m = NULL;
	size_t count = 0;
	int rc;

	*out = NULL;
	*n = 0;
	if ((rc = find_central(fd, path, size, &c)) != DVAR_OK)
		return rc;
	/* Each entry takes at least CENTRAL_BYTES, so this bounds the count. */
	if (c.entries > c.bytes / CENTRAL_BYTES)
		return dvar_error_set(DVAR_ECORRUPT, "'%s': bad .npz archive: %" PRIu64 " members "
		                                     "cannot fit in a %" PRIu64 "-byte directory", path,
		                      c.entries, c.bytes);
	if (!(dir = malloc(c.bytes ? (size_t)c.bytes : 1)) ||
	    !(m = calloc(c.entries ? (size_t)c.entries : 1, sizeof(*m)))) {
		free(dir);
		return dvar_error_set(DVAR_ENOMEM, "'%s': out of memory for its directory", path);
	}
	rc = dvar_fs_pread_all(fd, dir, (size_t)c.bytes, c.offset, path);
	const unsigned char *p = dir;
	size_t left = (size_t)c.bytes;
	for (; rc == DVAR_OK && count < c.entries; count++)
		rc = read_entry(path, &p, &left, &m[count]);
	free(dir);
	if (rc != DVAR_OK) {
		dvar_zip_members_free(m, (size_t)c.entries);
		return rc;
	}
	*out = m;
	*n = count;
	return DVAR_OK;
}

void dvar_zip_members_free(dvar_zip_member *m, size_t n)
{
	for (size_t i = 0; m && i < n; i++)
		free(m[i].name);
	free(m);
}

/* ---------------------------------------------------------- streaming */

struct dvar_zip_stream {
	int fd;
	const char *path;
	const dvar_zip_member *m;
	uint64_t in_pos, in_end; /* the member's compressed bytes left in the file */
	uint64_t out;            /* bytes handed out so far */
	uint32_t crc;            /* of those bytes */
	int inflating;           /* z is initialised */
	int ended;               /* inflate reached the deflate stream's end */
	z_stream z;
	unsigned char in[ZIP_IN_BYTES];
};

int dvar_zip_open(dvar_zip_stream **out, int fd, const char *path, uint64_t size,
                  const dvar_zip_member *m)
{
	unsigned char h[LOCAL_BYTES];
	int rc;

	*out = NULL;
	if (m->flags & (FLAG_ENCRYPTED | FLAG_STRONG_ENCRYPTION))
		return dvar_error_set(DVAR_ENOTSUPP, "'%s': member '%s' is encrypted; dvar reads "
		                                     "unencrypted archives only", path, m->name);
	if (m->method != METHOD_STORED && m->method != METHOD_DEFLATED)
		return dvar_error_set(DVAR_ENOTSUPP, "'%s': member '%s' is compressed with zip method "
		                                     "%u; dvar reads stored (0) and deflated (8) "
		                                     "members, as np.savez and np.savez_compressed "
		                                     "write them", path, m->name, m->method);
	if (m->method == METHOD_STORED && m->csize != m->usize)
		return dvar_error_set(DVAR_ECORRUPT, "'%s': bad .npz archive: stored member '%s' has "
		                                     "%" PRIu64 " bytes and %" PRIu64 " bytes", path,
		                      m->name, m->csize, m->usize);
	if (m->header > size || size - m->header < LOCAL_BYTES ||
	    (rc = dvar_fs_pread_all(fd, h, LOCAL_BYTES, m->header, path)) != DVAR_OK ||
	    le32(h) != SIG_LOCAL)
		return dvar_error_set(DVAR_ECORRUPT, "'%s': bad .npz archive: member '%s' has no "
		                                     "local header where its directory entry says",
		                      path, m->name);
	uint64_t data = m->header + LOCAL_BYTES + le16(h + 26) + le16(h + 28);
	if (data > size || m->csize > size - data)
		return dvar_error_set(DVAR_ECORRUPT, "'%s': truncated .npz archive: member '%s' needs "
		                                     "%" PRIu64 " bytes from offset %" PRIu64 ", the "
		                                     "file has %" PRIu64, path, m->name, m->csize,
		                      data, size);
	dvar_zip_stream *s = calloc(1, sizeof(*s));
	if (!s)
		return dvar_error_set(DVAR_ENOMEM, "'%s': out of memory", path);
	s->fd = fd;
	s->path = path;
	s->m = m;
	s->in_pos = data;
	s->in_end = data + m->csize;
	s->crc = (uint32_t)crc32(0L, Z_NULL, 0);
	if (m->method == METHOD_DEFLATED) {
		/* Raw deflate: zip has no zlib header around it. */
		if (inflateInit2(&s->z, -MAX_WBITS) != Z_OK) {
			free(s);
			return dvar_error_set(DVAR_ENOMEM, "'%s': out of memory for inflating", path);
		}
		s->inflating = 1;
	}
	*out = s;
	return DVAR_OK;
}

static int bad_deflate(const dvar_zip_stream *s, const char *why)
{
	return dvar_error_set(DVAR_ECORRUPT, "'%s': member '%s' is damaged: bad deflate data (%s)",
	                      s->path, s->m->name, why);
}

/* Inflate into buf until len bytes came out (or the stream ended: *got fewer). */
static int inflate_some(dvar_zip_stream *s, unsigned char *buf, size_t len, size_t *got)
{
	int rc;

	s->z.next_out = buf;
	s->z.avail_out = (uInt)len;
	while (s->z.avail_out && !s->ended) {
		if (!s->z.avail_in && s->in_pos < s->in_end) {
			uint64_t left = s->in_end - s->in_pos;
			size_t n = left < sizeof(s->in) ? (size_t)left : sizeof(s->in);
			if ((rc = dvar_fs_pread_all(s->fd, s->in, n, s->in_pos, s->path)) != DVAR_OK)
				return rc;
			s->in_pos += n;
			s->z.next_in = s->in;
			s->z.avail_in = (uInt)n;
		}
		int zr = inflate(&s->z, Z_NO_FLUSH);
		if (zr == Z_STREAM_END)
			s->ended = 1;
		else if (zr == Z_MEM_ERROR)
			return dvar_error_set(DVAR_ENOMEM, "'%s': out of memory inflating member '%s'",
			                      s->path, s->m->name);
		else if (zr == Z_BUF_ERROR && !s->z.avail_in)
			return bad_deflate(s, "it ends early");
		else if (zr != Z_OK)
			return bad_deflate(s, s->z.msg ? s->z.msg : "cannot be inflated");
	}
	*got = len - s->z.avail_out;
	return DVAR_OK;
}

int dvar_zip_read(dvar_zip_stream *s, void *buf, size_t len)
{
	const dvar_zip_member *m = s->m;
	unsigned char extra;
	size_t got = 0;
	int rc;

	if (len > m->usize - s->out)
		return dvar_error_set(DVAR_EINVAL, "'%s': reading %zu bytes past the end of member "
		                                   "'%s'", s->path, len, m->name);
	/* inflate takes at most 4 GiB of output a call. */
	for (size_t done = 0; done < len; done += got) {
		size_t want = len - done < 0x40000000u ? len - done : 0x40000000u;
		if (!s->inflating) {
			rc = dvar_fs_pread_all(s->fd, (unsigned char *)buf + done, want, s->in_pos, s->path);
			got = want;
			s->in_pos += got;
		} else {
			rc = inflate_some(s, (unsigned char *)buf + done, want, &got);
		}
		if (rc != DVAR_OK)
			return rc;
		if (got < want)
			return dvar_error_set(DVAR_ECORRUPT, "'%s': member '%s' is damaged: it inflates "
			                                     "to %" PRIu64 " bytes, its directory entry "
			                                     "says %" PRIu64, s->path, m->name,
			                      s->out + done + got, m->usize);
	}
	/* crc32 takes at most 4 GiB a call, too. */
	for (size_t done = 0; done < len;) {
		size_t n = len - done < 0x40000000u ? len - done : 0x40000000u;
		s->crc = (uint32_t)crc32(s->crc, (const unsigned char *)buf + done, (uInt)n);
		done += n;
	}
	s->out += len;
	if (s->out < m->usize)
		return DVAR_OK;
	/* The last byte: the deflate stream must end here and the CRC match. */
	if (s->inflating && !s->ended) {
		if ((rc = inflate_some(s, &extra, 1, &got)) != DVAR_OK)
			return rc;
		if (got || !s->ended)
			return dvar_error_set(DVAR_ECORRUPT, "'%s': member '%s' is damaged: it inflates "
			                                     "to more than the %" PRIu64 " bytes its "
			                                     "directory entry says", s->path, m->name,
			                      m->usize);
	}
	if (s->crc != m->crc)
		return dvar_error_set(DVAR_ECORRUPT, "'%s': member '%s' fails its CRC-32 check "
		                                     "(0x%08" PRIx32 ", the archive says 0x%08" PRIx32
		                                     "): the archive is damaged", s->path, m->name,
		                      s->crc, m->crc);
	return DVAR_OK;
}

void dvar_zip_close(dvar_zip_stream *s)
{
	if (!s)
		return;
	if (s->inflating)
		inflateEnd(&s->z);
	free(s);
}
