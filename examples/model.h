/*
 * examples/model.h - the click model dvar-train trains and dvar-serve
 * serves: its variables' names, the synthetic data, and the prediction
 * both programs compute with the same code, so that their predictions can
 * be compared bit for bit.
 *
 * An example is one row of float32: MODEL_FEATURES dense features, the
 * label (0 or 1), then MODEL_IDS ids into the embedding table (exact in
 * float32 below 2^24, which limits the vocabulary). It is a pure function
 * of (seed, vocab, index), drawn from a hidden true model: a logistic
 * regression over the features plus a score per id, ids drawn with a heavy
 * head (a few thousand ids take half the lookups) as click logs have.
 *
 * The model: h = the sum of the embedding rows of the ids (dim floats);
 * logit = [h, features] . kernel + bias; p = sigmoid(logit). Nothing here
 * allocates or keeps state.
 */
#ifndef DVAR_EXAMPLES_MODEL_H
#define DVAR_EXAMPLES_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MODEL_EMBEDDING "embedding"       /* sharded, [vocab, dim] float32 */
#define MODEL_KERNEL "dense/kernel"       /* mirrored, [dim + MODEL_FEATURES, 1] float32 */
#define MODEL_BIAS "dense/bias"           /* mirrored, [1] float32 */
#define MODEL_LOSS "metrics/loss_nanos"   /* sync-on-read SUM, int64: the loss in 1e-9 units */
#define MODEL_EXAMPLES "metrics/examples" /* sync-on-read SUM, int64 */
#define MODEL_CORRECT "metrics/correct"   /* sync-on-read SUM, int64 */
#define MODEL_STEP "global_step"          /* a plain int64 scalar */
#define MODEL_SEED "config/seed"          /* a plain int64 scalar: the data's seed */
#define MODEL_INPUT "input"               /* the input iterator's position */

enum {
	MODEL_FEATURES = 8,
	MODEL_IDS = 4,
	MODEL_LABEL = MODEL_FEATURES,     /* column of the label */
	MODEL_ID0 = MODEL_FEATURES + 1,   /* column of the first id */
	MODEL_ROW = MODEL_FEATURES + 1 + MODEL_IDS,
	MODEL_MAX_QUERY_IDS = 64
};

/* Ids are stored as float32; every integer below this is exact. */
#define MODEL_MAX_VOCAB (INT64_C(1) << 24)

/* Learning rates of plain SGD on the mean loss of a global batch. */
#define MODEL_LR_DENSE 0.5f
#define MODEL_LR_EMBEDDING 5.0f

/** Example index of the dataset: MODEL_ROW floats into row. */
void model_example(uint64_t seed, int64_t vocab, int64_t index, float *row);

/** Initial embedding rows [row0, row0 + rows) of width dim, into dst. */
void model_embedding_init(uint64_t seed, int64_t row0, int64_t rows, int64_t dim, float *dst);

/** Initial kernel (dim + MODEL_FEATURES floats). The bias starts at 0. */
void model_kernel_init(uint64_t seed, int64_t dim, float *dst);

/**
 * The logit of one example: rows holds nids embedding rows of width dim
 * (the rows of its ids, in order); pooled (dim floats) receives their sum.
 * features may be NULL (all zero).
 */
float model_logit(const float *rows, int nids, int64_t dim, const float *features,
                  const float *kernel, float bias, float *pooled);

/** 1 / (1 + exp(-z)). */
float model_sigmoid(float z);

/** Binary cross-entropy of a logit against a 0/1 label, computed stably. */
double model_loss(float logit, float label);

/** A query: ids (their rows are summed) and optional features. */
typedef struct {
	int64_t ids[MODEL_MAX_QUERY_IDS];
	int nids;
	float features[MODEL_FEATURES];
	int has_features;
} model_query;

/**
 * Parse one query line: 1..MODEL_MAX_QUERY_IDS ids, then optionally ';' and
 * MODEL_FEATURES feature values ("12 7 40000 ; 0.5 -1 0 0 0 0 0 2").
 * Returns 1 for a query, 0 for a blank or '#' line, -1 with err filled
 * (what is wrong) for anything else. Ids are not checked against the
 * vocabulary here.
 */
int model_parse_query(const char *line, model_query *q, char *err, size_t err_cap);

/** The line both programs print for a query's prediction. */
void model_print_prediction(FILE *f, const model_query *q, float logit);

#endif
