/*
 * format/slicekey.c - the keys of a partitioned tensor's slices in a
 * TensorBundle (format/tf.h): TensorFlow's EncodeTensorNameSlice and its
 * decoding, in OrderedCode's NumIncreasing, String and SignedNumIncreasing
 * encodings (../shared/reference/tf-behavior.md §4.6). Decoding accepts
 * canonical encodings only, so that a key decodes to one slice and back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/tf.h"

/* ---------------------------------------------------------------- OrderedCode keys */

static int put_num_increasing(dvar_bytes *o, uint64_t v)
{
	unsigned char buf[9];
	int n = 0;
	for (uint64_t x = v; x; x >>= 8)
		n++;
	buf[0] = (unsigned char)n;
	for (int i = 0; i < n; i++)
		buf[1 + i] = (unsigned char)(v >> (8 * (n - 1 - i)));
	return dvar_bytes_put(o, buf, (size_t)n + 1);
}

static const unsigned char signed_hdr[11][2] = {
	{ 0, 0 }, { 0x80, 0 }, { 0xc0, 0 }, { 0xe0, 0 }, { 0xf0, 0 }, { 0xf8, 0 },
	{ 0xfc, 0 }, { 0xfe, 0 }, { 0xff, 0 }, { 0xff, 0x80 }, { 0xff, 0xc0 },
};

/* WriteSignedNumIncreasing into buf (10 bytes); returns the length. */
static int signed_encode(int64_t v, unsigned char *buf)
{
	uint64_t x = v < 0 ? ~(uint64_t)v : (uint64_t)v;
	if (x < 64) {
		buf[0] = (unsigned char)(0x80 ^ (uint64_t)v);
		return 1;
	}
	int bits = 0;
	for (uint64_t t = x; t; t >>= 1)
		bits++;
	int len = (bits + 7) / 7;   /* kBitsToLength: 7 bits per byte, one of them the sign */
	if (len < 2)
		len = 2;
	unsigned char ext[10];
	ext[0] = ext[1] = v < 0 ? 0xff : 0;
	for (int i = 0; i < 8; i++)
		ext[2 + i] = (unsigned char)((uint64_t)v >> (8 * (7 - i)));
	memcpy(buf, ext + 10 - len, (size_t)len);
	buf[0] ^= signed_hdr[len][0];
	buf[1] ^= signed_hdr[len][1];
	return len;
}

int dvar_tf__signed_encode(int64_t v, unsigned char *buf)
{
	return signed_encode(v, buf);
}

/* ReadSignedNumIncreasing; only canonical encodings are accepted. Returns the length or -1. */
int dvar_tf__signed_decode(const unsigned char *p, size_t n, int64_t *out)
{
	if (n == 0)
		return -1;
	unsigned char m = (p[0] & 0x80) ? 0 : 0xff;
	unsigned char c0 = p[0] ^ m;
	int len;
	if (c0 != 0xff) {
		len = 0;
		while (len < 8 && (c0 << len) & 0x80)
			len++;
	} else {
		if (n < 2)
			return -1;
		unsigned char c1 = p[1] ^ m;
		len = c1 < 0x80 ? 8 : c1 < 0xc0 ? 9 : 10;
	}
	if ((size_t)len > n)
		return -1;
	unsigned char orig[10] = { 0 };
	memcpy(orig, p, (size_t)len);
	orig[0] ^= signed_hdr[len][0];
	if (len > 1)
		orig[1] ^= signed_hdr[len][1];
	uint64_t acc = (orig[0] & 0x80) ? ~(uint64_t)0 : 0;
	for (int i = 0; i < len; i++)
		acc = acc << 8 | orig[i];
	int64_t v = (int64_t)acc;
	unsigned char re[10];
	if (signed_encode(v, re) != len || memcmp(re, p, (size_t)len) != 0)
		return -1;
	*out = v;
	return len;
}

static int put_signed(dvar_bytes *o, int64_t v)
{
	unsigned char buf[10];
	return dvar_bytes_put(o, buf, (size_t)signed_encode(v, buf));
}

int dvar_tf_slice_key_encode(dvar_bytes *out, const char *full_key, size_t full_len,
                             const dvar_tf_slice *slice)
{
	static const unsigned char esc0[2] = { 0x00, 0xff }, escf[2] = { 0xff, 0x00 },
	                           term[2] = { 0x00, 0x01 };
	const unsigned char *k = (const unsigned char *)full_key;
	int rc = put_num_increasing(out, 0);
	size_t run = 0;
	for (size_t i = 0; !rc && i <= full_len; i++) {
		if (i < full_len && k[i] != 0x00 && k[i] != 0xff)
			continue;
		rc = dvar_bytes_put(out, k + run, i - run);
		if (!rc && i < full_len)
			rc = dvar_bytes_put(out, k[i] ? escf : esc0, 2);
		run = i + 1;
	}
	if (!rc) rc = dvar_bytes_put(out, term, 2);
	if (!rc) rc = put_num_increasing(out, (uint64_t)slice->rank);
	for (int d = 0; !rc && d < slice->rank; d++) {
		int full = slice->length[d] < 0;
		rc = put_signed(out, full ? 0 : slice->start[d]);
		if (!rc) rc = put_signed(out, full ? -1 : slice->length[d]);
	}
	return rc;
}

/* ReadNumIncreasing, canonical only; returns bytes used or -1. */
static int num_increasing_decode(const unsigned char *p, size_t n, uint64_t *out)
{
	if (n == 0 || p[0] > 8 || (size_t)p[0] + 1 > n || (p[0] && p[1] == 0))
		return -1;
	uint64_t v = 0;
	for (int i = 0; i < p[0]; i++)
		v = v << 8 | p[1 + i];
	*out = v;
	return p[0] + 1;
}

void dvar_tf_key_printable(const unsigned char *p, size_t n, char *buf, size_t cap)
{
	size_t at = 0;
	for (size_t i = 0; i < n; i++) {
		int plain = p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\';
		if (at + (plain ? 1 : 4) + 4 > cap) {
			memcpy(buf + at, "...", 3);
			at += 3;
			break;
		}
		if (plain)
			buf[at++] = (char)p[i];
		else
			at += (size_t)snprintf(buf + at, cap - at, "\\x%02x", p[i]);
	}
	buf[at] = '\0';
}

int dvar_tf_slice_key_decode(const void *key, size_t klen, char **full_key, size_t *full_len,
                             dvar_tf_slice *slice)
{
	const unsigned char *p = key, *end = p + klen;
	char shown[160];
	const char *why;
	uint64_t v;
	int u;
	*full_key = NULL;
	*full_len = 0;
	memset(slice, 0, sizeof(*slice));
	if (klen == 0 || p[0] != 0)
		return 0;
	dvar_tf_key_printable(p, klen, shown, sizeof(shown));
	/* NumIncreasing(0) is the single byte 00. */
	p++;
	/* String: find the terminator, unescape into a buffer no longer than the escaped bytes. */
	char *name = malloc((size_t)(end - p) + 1);
	size_t nl = 0;
	if (!name)
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	for (;;) {
		if (p == end) {
			why = "the tensor name is not terminated";
			goto bad;
		}
		if (*p == 0x00 || *p == 0xff) {
			if (end - p < 2) {
				why = "the tensor name ends in a broken escape";
				goto bad;
			}
			if (p[0] == 0x00 && p[1] == 0x01) {
				p += 2;
				break;
			}
			if (p[0] == 0x00 && p[1] == 0xff)
				name[nl++] = 0;
			else if (p[0] == 0xff && p[1] == 0x00)
				name[nl++] = (char)0xff;
			else {
				why = "the tensor name holds a bad escape";
				goto bad;
			}
			p += 2;
		} else {
			name[nl++] = (char)*p++;
		}
	}
	name[nl] = '\0';
	if ((u = num_increasing_decode(p, (size_t)(end - p), &v)) < 0) {
		why = "failed to parse the tensor rank";
		goto bad;
	}
	p += u;
	if (v == 0) {
		why = "Expecting positive rank of the tensor, got 0";
		goto bad;
	}
	if (v > DVAR_MAX_RANK) {
		why = "the slice has more than 8 dimensions";
		goto bad;
	}
	slice->rank = (int32_t)v;
	for (int d = 0; d < slice->rank; d++) {
		int64_t start, length;
		if ((u = dvar_tf__signed_decode(p, (size_t)(end - p), &start)) < 0) {
			why = "failed to parse start";
			goto bad;
		}
		p += u;
		if ((u = dvar_tf__signed_decode(p, (size_t)(end - p), &length)) < 0) {
			why = "failed to parse length";
			goto bad;
		}
		p += u;
		if (length < 0 ? (start != 0 || length != -1) : start < 0) {
			why = "a bad extent";
			goto bad;
		}
		slice->start[d] = length < 0 ? 0 : start;
		slice->length[d] = length < 0 ? -1 : length;
	}
	if (p != end) {
		why = "trailing bytes";
		goto bad;
	}
	*full_key = name;
	*full_len = nl;
	return 1;
bad:
	free(name);
	memset(slice, 0, sizeof(*slice));
	return dvar_error_set(DVAR_ECORRUPT, "index key '%s' is not a valid slice key: %s", shown, why);
}
