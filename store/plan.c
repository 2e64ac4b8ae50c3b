/*
 * store/plan.c - the save plan: one writer per value, the bytes balanced
 * across workers (store/plan.h, docs/STORE.md "The save plan").
 */
#include <stdint.h>
#include <stdlib.h>

#include "core/core.h"
#include "store/plan.h"

typedef struct {
	size_t bytes, index;
} plan_key;

/* Largest first, then list order: the same order on every worker. */
static int plan_cmp(const void *a, const void *b)
{
	const plan_key *x = a, *y = b;

	if (x->bytes != y->bytes)
		return x->bytes < y->bytes ? 1 : -1;
	return (x->index > y->index) - (x->index < y->index);
}

int dvar_store_plan(const dvar_plan_value *values, size_t n, int W, int *writers)
{
	uint64_t *load;
	plan_key *keys;
	size_t k = 0;

	if (W < 1)
		return dvar_error_set(DVAR_EINVAL, "the save plan needs a worker, not %d", W);
	for (size_t i = 0; i < n; i++)
		if (values[i].holder < DVAR_PLAN_ANY_WORKER || values[i].holder >= W)
			return dvar_error_set(DVAR_EINVAL, "value #%zu is held by worker %d of %d", i,
			                      values[i].holder, W);
	load = calloc((size_t)W, sizeof *load);
	keys = malloc((n ? n : 1) * sizeof *keys);
	if (!load || !keys) {
		free(load);
		free(keys);
		return dvar_error_set(DVAR_ENOMEM, "out of memory");
	}
	/* A held value can go nowhere else: its bytes load its holder before
	 * the others are spread around them. */
	for (size_t i = 0; i < n; i++) {
		if (values[i].holder != DVAR_PLAN_ANY_WORKER) {
			writers[i] = values[i].holder;
			load[writers[i]] += values[i].nbytes;
		} else {
			keys[k].bytes = values[i].nbytes;
			keys[k++].index = i;
		}
	}
	qsort(keys, k, sizeof *keys, plan_cmp);
	for (size_t q = 0; q < k; q++) {
		int best = 0;

		for (int w = 1; w < W; w++)
			if (load[w] < load[best])
				best = w;
		writers[keys[q].index] = best;
		load[best] += keys[q].bytes;
	}
	free(load);
	free(keys);
	return DVAR_OK;
}
