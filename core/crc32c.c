/*
 * core/crc32c.c - CRC-32C (Castagnoli), the checksum of every chunk and of
 * TensorBundle entries. SSE4.2's crc32 instruction when the CPU has it
 * (three interleaved streams on long buffers, as in Mark Adler's crc32c.c),
 * and on long buffers before it, where the CPU has VPCLMULQDQ, carry-less
 * folding of 256 bytes at a time (Intel's "Fast CRC Computation for Generic
 * Polynomials Using PCLMULQDQ") in 512-bit registers with AVX-512, in
 * 256-bit ones with AVX2 (AMD Zen 3); slice-by-8 tables otherwise, and
 * zlib's x^(8n) mod P method for combining.
 */
#include <pthread.h>
#include <string.h>

#include "core/core.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_SSE42_PATH 1
#include <immintrin.h>
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

/* x^(n 2^k) mod P. */
static uint32_t xpow(uint64_t n, unsigned k)
{
	uint32_t p = 1u << 31;

	for (; n; n >>= 1, k++)
		if (n & 1)
			p = multmodp(x2n[k], p);
	return p;
}

/* x^(8n) mod P: the operator that runs a CRC register over n zero bytes. */
static uint32_t x8nmodp(uint64_t n)
{
	return xpow(n, 3);
}

#ifdef HAVE_SSE42_PATH
/* Stream lengths of the 3-way loop: long for big buffers, short for the
 * remainder. Each stream is folded into the next by a table "shift". */
#define LONG_BLOCK 8192
#define SHORT_BLOCK 256

/* Folding: 0 none, 2 in 512-bit registers, 3 in 256-bit ones (the levels
 * of dvar_crc32c__hw). */
static int have_sse42, have_fold;
static uint32_t long_shift[4][256];
static uint32_t short_shift[4][256];

/*
 * Folding. A 16-byte lane is a polynomial of degree < 128, its first byte's
 * low bit the x^127 term; a 64-bit half h of it times a 32-bit constant k
 * (x^0 its top bit, as in multmodp), carry-less, is the lane x^33 h k. So
 * moving a lane D bits on, congruent mod P, is its first half times
 * x^(D+64-33) plus its second half times x^(D-33): the pair for D, as the
 * low and high quadwords of each 128-bit lane of a constant vector.
 */
#define FOLD_BLOCK 256   /* bytes per step: four 64-byte registers */
#define FOLD_MIN 1024    /* shorter buffers gain nothing over crc_3way */
static uint64_t fold_step[8];  /* D = 2048 in every lane */
static uint64_t fold_reg[8];   /* D = 512: one register into the next */
static uint64_t fold_lanes[8]; /* D = 384, 256, 128, and none: a register into its last lane */
static uint64_t fold_reg256[4]; /* D = 256: one 256-bit register into the next */

static void fold_pair(uint64_t *lane, uint64_t d)
{
	lane[0] = xpow(d + 31, 0);
	lane[1] = xpow(d - 33, 0);
}

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
	if (have_sse42 && __builtin_cpu_supports("vpclmulqdq"))
		have_fold = __builtin_cpu_supports("avx512f") ? 2
		            : __builtin_cpu_supports("avx2")  ? 3
		                                              : 0;
	init_shift(long_shift, LONG_BLOCK);
	init_shift(short_shift, SHORT_BLOCK);
	for (int l = 0; l < 4; l++) {
		fold_pair(fold_step + 2 * l, 8 * FOLD_BLOCK);
		fold_pair(fold_reg + 2 * l, 512);
		if (l < 3)
			fold_pair(fold_lanes + 2 * l, 128 * (3 - (uint64_t)l));
		if (l < 2)
			fold_pair(fold_reg256 + 2 * l, 256);
	}
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

#define FOLD_TARGET __attribute__((target("sse4.2,avx512f,vpclmulqdq")))

/* x moved on by the constants' distance, plus d. */
FOLD_TARGET static inline __m512i fold(__m512i x, __m512i k, __m512i d)
{
	return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
	                                 _mm512_clmulepi64_epi128(x, k, 0x11), d, 0x96);
}

/* The CRC register c run over the whole FOLD_BLOCKs at *pp (at least
 * FOLD_MIN bytes), which it consumes: c goes into the first four bytes,
 * the blocks are folded into one lane, and the crc32 instruction reduces
 * that lane, whose CRC from zero is the data's. */
FOLD_TARGET static uint64_t crc_fold(uint64_t c, const unsigned char **pp, size_t *lenp)
{
	const unsigned char *p = *pp;
	size_t len = *lenp;
	__m512i k = _mm512_loadu_si512(fold_step);
	__m512i x0 = _mm512_xor_si512(_mm512_loadu_si512(p),
	                              _mm512_inserti32x4(_mm512_setzero_si512(),
	                                                 _mm_cvtsi32_si128((int)(uint32_t)c), 0));
	__m512i x1 = _mm512_loadu_si512(p + 64), x2 = _mm512_loadu_si512(p + 128);
	__m512i x3 = _mm512_loadu_si512(p + 192);

	for (p += FOLD_BLOCK, len -= FOLD_BLOCK; len >= FOLD_BLOCK; p += FOLD_BLOCK, len -= FOLD_BLOCK) {
		x0 = fold(x0, k, _mm512_loadu_si512(p));
		x1 = fold(x1, k, _mm512_loadu_si512(p + 64));
		x2 = fold(x2, k, _mm512_loadu_si512(p + 128));
		x3 = fold(x3, k, _mm512_loadu_si512(p + 192));
	}
	k = _mm512_loadu_si512(fold_reg);
	x3 = fold(fold(fold(x0, k, x1), k, x2), k, x3);
	/* The last lane has no constants: it is added as it is. */
	x3 = fold(x3, _mm512_loadu_si512(fold_lanes), _mm512_maskz_mov_epi64(0xc0, x3));
	__m128i l = _mm_xor_si128(_mm_xor_si128(_mm512_extracti32x4_epi32(x3, 0),
	                                        _mm512_extracti32x4_epi32(x3, 1)),
	                          _mm_xor_si128(_mm512_extracti32x4_epi32(x3, 2),
	                                        _mm512_extracti32x4_epi32(x3, 3)));
	*pp = p;
	*lenp = len;
	return _mm_crc32_u64(_mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(l)),
	                     (uint64_t)_mm_extract_epi64(l, 1));
}

#define FOLD256_TARGET __attribute__((target("sse4.2,avx2,vpclmulqdq")))

FOLD256_TARGET static inline __m256i fold256(__m256i x, __m256i k, __m256i d)
{
	return _mm256_xor_si256(_mm256_xor_si256(_mm256_clmulepi64_epi128(x, k, 0x00),
	                                         _mm256_clmulepi64_epi128(x, k, 0x11)),
	                        d);
}

/* crc_fold in eight 256-bit registers: the same FOLD_BLOCKs and distances
 * per block, a register folded into the next 256 bits on, and its first
 * lane 128 bits on into its second. */
FOLD256_TARGET static uint64_t crc_fold256(uint64_t c, const unsigned char **pp, size_t *lenp)
{
	const unsigned char *p = *pp;
	size_t len = *lenp;
	__m256i k = _mm256_loadu_si256((const __m256i *)fold_step);
	__m256i x[8];

	for (int i = 0; i < 8; i++)
		x[i] = _mm256_loadu_si256((const __m256i *)(p + 32 * i));
	x[0] = _mm256_xor_si256(x[0], _mm256_zextsi128_si256(_mm_cvtsi32_si128((int)(uint32_t)c)));
	for (p += FOLD_BLOCK, len -= FOLD_BLOCK; len >= FOLD_BLOCK; p += FOLD_BLOCK, len -= FOLD_BLOCK)
		for (int i = 0; i < 8; i++)
			x[i] = fold256(x[i], k, _mm256_loadu_si256((const __m256i *)(p + 32 * i)));
	k = _mm256_loadu_si256((const __m256i *)fold_reg256);
	__m256i r = x[0];
	for (int i = 1; i < 8; i++)
		r = fold256(r, k, x[i]);
	/* fold_lanes' last two lanes: 128 bits on, and none for the last. */
	r = fold256(r, _mm256_loadu_si256((const __m256i *)(fold_lanes + 4)),
	            _mm256_blend_epi32(_mm256_setzero_si256(), r, 0xf0));
	__m128i l = _mm_xor_si128(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
	*pp = p;
	*lenp = len;
	return _mm_crc32_u64(_mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(l)),
	                     (uint64_t)_mm_extract_epi64(l, 1));
}

/* level: 1 SSE4.2 alone, 2 or 3 folding first (in 512- or 256-bit
 * registers) where the buffer is long. */
__attribute__((target("sse4.2")))
static uint32_t crc_sse42(uint32_t crc, const unsigned char *p, size_t len, int level)
{
	uint64_t c = ~crc;

	if (level == 2 && len >= FOLD_MIN)
		c = crc_fold(c, &p, &len);
	else if (level == 3 && len >= FOLD_MIN)
		c = crc_fold256(c, &p, &len);
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
		return crc_sse42(crc, buf, len, have_fold ? have_fold : 1);
#endif
	return crc_table(crc, buf, len);
}

uint32_t dvar_crc32c__table(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&init_once, init_tables);
	return crc_table(crc, buf, len);
}

int dvar_crc32c__hw(int level, uint32_t crc, const void *buf, size_t len, uint32_t *out)
{
#ifdef HAVE_SSE42_PATH
	pthread_once(&init_once, init_tables);
	/* A CPU with AVX-512 has AVX2: both widths of folding can be tested there. */
	if ((level == 1 && have_sse42) || (level > 1 && level == have_fold) ||
	    (level == 3 && have_fold == 2)) {
		*out = crc_sse42(crc, buf, len, level);
		return DVAR_OK;
	}
#else
	(void)level, (void)crc, (void)buf, (void)len, (void)out;
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
