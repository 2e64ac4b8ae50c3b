/*
 * examples/model.c - the click model's data, initial values and prediction
 * (model.h). Every random number is a hash of (seed, stream, index), so a
 * value never depends on which worker or replica computes it.
 */
#include "model.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Independent streams of the hash generator. */
enum { S_FEATURE = 1, S_ID, S_LABEL, S_TRUE_ID, S_TRUE_FEATURE, S_EMBEDDING, S_KERNEL };

static uint64_t mix(uint64_t x)
{
	x += UINT64_C(0x9e3779b97f4a7c15);
	x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
	return x ^ (x >> 31);
}

/* A uniform double in [0, 1) for (seed, stream, index). */
static double uniform(uint64_t seed, int stream, uint64_t index)
{
	uint64_t h = mix(mix(seed ^ ((uint64_t)stream << 56)) ^ index);
	return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

/* A standard normal (Box-Muller over two uniforms of the stream). */
static double normal(uint64_t seed, int stream, uint64_t index)
{
	double u1 = uniform(seed, stream, 2 * index), u2 = uniform(seed, stream, 2 * index + 1);
	return sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
}

void model_example(uint64_t seed, int64_t vocab, int64_t index, float *row)
{
	uint64_t base = (uint64_t)index * 16;
	double logit = -0.5;

	for (int f = 0; f < MODEL_FEATURES; f++) {
		double x = normal(seed, S_FEATURE, base + (uint64_t)f);
		row[f] = (float)x;
		logit += 1.0 * normal(seed, S_TRUE_FEATURE, (uint64_t)f) * row[f];
	}
	for (int k = 0; k < MODEL_IDS; k++) {
		/* u^6 puts half the lookups on the first ~1% of the ids. */
		double u = uniform(seed, S_ID, base + (uint64_t)k);
		int64_t id = (int64_t)((double)vocab * pow(u, 6.0));
		if (id >= vocab)
			id = vocab - 1;
		row[MODEL_ID0 + k] = (float)id;
		logit += 0.7 * normal(seed, S_TRUE_ID, (uint64_t)id);
	}
	row[MODEL_LABEL] = uniform(seed, S_LABEL, (uint64_t)index) < 1.0 / (1.0 + exp(-logit)) ? 1.0f
	                                                                                        : 0.0f;
}

void model_embedding_init(uint64_t seed, int64_t row0, int64_t rows, int64_t dim, float *dst)
{
	for (int64_t r = 0; r < rows; r++)
		for (int64_t c = 0; c < dim; c++)
			dst[r * dim + c] = (float)((uniform(seed, S_EMBEDDING,
			                                    (uint64_t)((row0 + r) * dim + c)) - 0.5) * 0.1);
}

void model_kernel_init(uint64_t seed, int64_t dim, float *dst)
{
	for (int64_t i = 0; i < dim + MODEL_FEATURES; i++)
		dst[i] = (float)(uniform(seed, S_KERNEL, (uint64_t)i) - 0.5);
}

float model_logit(const float *rows, int nids, int64_t dim, const float *features,
                  const float *kernel, float bias, float *pooled)
{
	float z = bias;

	for (int64_t c = 0; c < dim; c++) {
		float s = 0.0f;
		for (int k = 0; k < nids; k++)
			s += rows[(int64_t)k * dim + c];
		pooled[c] = s;
		z += s * kernel[c];
	}
	if (features)
		for (int f = 0; f < MODEL_FEATURES; f++)
			z += features[f] * kernel[dim + f];
	return z;
}

float model_sigmoid(float z)
{
	return 1.0f / (1.0f + expf(-z));
}

double model_loss(float logit, float label)
{
	double z = logit;
	return (z > 0 ? z : 0) - z * label + log1p(exp(-fabs(z)));
}

int model_parse_query(const char *line, model_query *q, char *err, size_t err_cap)
{
	const char *p = line;
	int in_features = 0;

	memset(q, 0, sizeof *q);
	while (isspace((unsigned char)*p))
		p++;
	if (*p == '\0' || *p == '#')
		return 0;
	for (;;) {
		char *end;
		while (isspace((unsigned char)*p))
			p++;
		if (*p == '\0')
			break;
		if (*p == ';') {
			if (in_features) {
				snprintf(err, err_cap, "a second ';'");
				return -1;
			}
			in_features = 1;
			p++;
			continue;
		}
		errno = 0;
		if (!in_features) {
			long long id = strtoll(p, &end, 10);
			if (end == p || errno || id < 0 || (*end && !isspace((unsigned char)*end) &&
			                                    *end != ';')) {
				snprintf(err, err_cap, "'%.*s' is not an id (a non-negative integer)",
				         (int)strcspn(p, " \t\n;"), p);
				return -1;
			}
			if (q->nids == MODEL_MAX_QUERY_IDS) {
				snprintf(err, err_cap, "more than %d ids", MODEL_MAX_QUERY_IDS);
				return -1;
			}
			q->ids[q->nids++] = id;
		} else {
			float v = strtof(p, &end);
			if (end == p || (*end && !isspace((unsigned char)*end)) || !isfinite(v)) {
				snprintf(err, err_cap, "'%.*s' is not a finite number", (int)strcspn(p, " \t\n"), p);
				return -1;
			}
			if (q->has_features == MODEL_FEATURES) {
				snprintf(err, err_cap, "more than %d features", MODEL_FEATURES);
				return -1;
			}
			q->features[q->has_features++] = v;
		}
		p = end;
	}
	if (q->nids == 0) {
		snprintf(err, err_cap, "no ids before ';'");
		return -1;
	}
	if (in_features && q->has_features != MODEL_FEATURES) {
		snprintf(err, err_cap, "%d features after ';', expected %d", q->has_features,
		         MODEL_FEATURES);
		return -1;
	}
	q->has_features = in_features;
	return 1;
}

void model_print_prediction(FILE *f, const model_query *q, float logit)
{
	fprintf(f, "ids=");
	for (int k = 0; k < q->nids; k++)
		fprintf(f, "%s%lld", k ? "," : "", (long long)q->ids[k]);
	fprintf(f, " p=%.9g logit=%.9g\n", (double)model_sigmoid(logit), (double)logit);
}
