/*
 * core/crc32c.c - CRC-32C (Castagnoli), the checksum of every chunk and of
 * TensorBundle entries. SSE4.2's crc32 instruction when the CPU has it
 * (three interleaved streams on long buffers, as in Mark Adler's crc32c.c),
 * slice-by-8 tables otherwise, and zlib's x^(8n) mod P method for combining.
 */
#include <pthread.h>
#include <string.h>

#include "core/core.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_SSE42_PATH 1
#include <nmmintrin.h>
#endif

/* The Castagnoli polynomial, bit-reflected. */
#define POLY 0x82f63b78u

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static uint32_t table[8][256];
/* x2n[k] = x^(2^k) mod P; k reaches 3 + 63 for a 64-bit byte count. */
static uint32_t x2n[67];

/* a * b mod P, both bit-reflected (x^0 is the top bit). */
static uint32_t multmodp(uint32_t a, uint32_t b)
{
	uint32_t m = 1u << 31, p = 0;

	for (;;) {
		if (a & m) {
			p ^= b;
			if ((a & (m - 1)) == 0)
				break;
		}
		m >>= 1;
		b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
	}
	return p;
}

/* x^(8n) mod P: the operator that runs a CRC register over n zero bytes. */
static uint32_t x8nmodp(uint64_t n)
{
	uint32_t p = 1u << 31;

	for (unsigned k = 3; n; n >>= 1, k++)
		if (n & 1)
			p = multmodp(x2n[k], p);
	return p;
}

#ifdef HAVE_SSE42_PATH
/* Stream lengths of the 3-way loop: long for big buffers, short for the
 * remainder. Each stream is folded into the next by a table "shift". */
#define LONG_BLOCK 8192
#define SHORT_BLOCK 256

static int have_sse42;
static uint32_t long_shift[4][256];
static uint32_t short_shift[4][256];

static void init_shift(uint32_t shift[4][256], uint64_t len)
{
	uint32_t op = x8nmodp(len);

	for (int k = 0; k < 4; k++)
		for (uint32_t v = 0; v < 256; v++)
			shift[k][v] = multmodp(op, v << (8 * k));
}
#endif

static void init_tables(void)
{
	for (uint32_t n = 0; n < 256; n++) {
		uint32_t c = n;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
		table[0][n] = c;
	}
	for (uint32_t n = 0; n < 256; n++)
		for (int k = 1; k < 8; k++)
			table[k][n] = (table[k - 1][n] >> 8) ^ table[0][table[k - 1][n] & 0xff];
	x2n[0] = 1u << 30; /* x^1 */
	for (int k = 1; k < 67; k++)
		x2n[k] = multmodp(x2n[k - 1], x2n[k - 1]);
#ifdef HAVE_SSE42_PATH
	__builtin_cpu_init();
	have_sse42 = __builtin_cpu_supports("sse4.2");
	init_shift(long_shift, LONG_BLOCK);
	init_shift(short_shift, SHORT_BLOCK);
#endif
}

static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Slice-by-8; bytes are assembled explicitly so big-endian hosts work too. */
static uint32_t crc_table(uint32_t crc, const unsigned char *p, size_t len)
{
	crc = ~crc;
	for (; len >= 8; p += 8, len -= 8) {
		uint32_t lo = crc ^ le32(p), hi = le32(p + 4);
		crc = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^
		      table[5][(lo >> 16) & 0xff] ^ table[4][lo >> 24] ^
		      table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^
		      table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
	}
	while (len--)
		crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
	return ~crc;
}

#ifdef HAVE_SSE42_PATH
static uint32_t shift_crc(uint32_t shift[4][256], uint32_t c)
{
	return shift[0][c & 0xff] ^ shift[1][(c >> 8) & 0xff] ^ shift[2][(c >> 16) & 0xff] ^
	       shift[3][c >> 24];
}

static uint64_t load64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof v);
	return v;
}

/* Three independent crc32 chains over consecutive blocks of len bytes keep
 * the instruction's pipeline (latency 3, one per cycle) full. */
__attribute__((target("sse4.2")))
static uint64_t crc_3way(uint64_t c, const unsigned char **pp, size_t *lenp, size_t block,
                         uint32_t shift[4][256])
{
	const unsigned char *p = *pp;
	size_t len = *lenp;

	while (len >= 3 * block) {
		const unsigned char *end = p + block;
		uint64_t c1 = 0, c2 = 0;
		do {
			c = _mm_crc32_u64(c, load64(p));
			c1 = _mm_crc32_u64(c1, load64(p + block));
			c2 = _mm_crc32_u64(c2, load64(p + 2 * block));
			p += 8;
		} while (p < end);
		c = shift_crc(shift, (uint32_t)c) ^ c1;
		c = shift_crc(shift, (uint32_t)c) ^ c2;
		p += 2 * block;
		len -= 3 * block;
	}
	*pp = p;
	*lenp = len;
	return c;
}

__attribute__((target("sse4.2")))
static uint32_t crc_sse42(uint32_t crc, const unsigned char *p, size_t len)
{
	uint64_t c = ~crc;

	for (; len && ((uintptr_t)p & 7); len--)
		c = _mm_crc32_u8((uint32_t)c, *p++);
	c = crc_3way(c, &p, &len, LONG_BLOCK, long_shift);
	c = crc_3way(c, &p, &len, SHORT_BLOCK, short_shift);
	for (; len >= 8; p += 8, len -= 8)
		c = _mm_crc32_u64(c, load64(p));
	while (len--)
		c = _mm_crc32_u8((uint32_t)c, *p++);
	return ~(uint32_t)c;
}
#endif

uint32_t dvar_crc32c_extend(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&init_once, init_tables);
#ifdef HAVE_SSE42_PATH
	if (have_sse42)
		return crc_sse42(crc, buf, len);
#endif
	return crc_table(crc, buf, len);
}

uint32_t dvar_crc32c__table(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&init_once, init_tables);
	return crc_table(crc, buf, len);
}

int dvar_crc32c__hw(uint32_t crc, const void *buf, size_t len, uint32_t *out)
{
#ifdef HAVE_SSE42_PATH
	pthread_once(&init_once, init_tables);
	if (have_sse42) {
		*out = crc_sse42(crc, buf, len);
		return DVAR_OK;
	}
#else
	(void)crc, (void)buf, (void)len, (void)out;
#endif
	return DVAR_ENOTSUPP;
}

/* Running A's register over len_b zero bytes is multiplying it by
 * x^(8 len_b); the pre/post inversions cancel, as in zlib. */
uint32_t dvar_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
	pthread_once(&init_once, init_tables);
	return multmodp(x8nmodp(len_b), crc_a) ^ crc_b;
}
