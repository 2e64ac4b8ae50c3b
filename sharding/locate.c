/*
 * sharding/locate.c - which shard and which of its rows hold an id:
 * embedding_lookup's "mod" and "div" formulas (TF's
 * _embedding_lookup_and_transform; the div one is also
 * ShardedVariable._decompose_indices).
 */
#include "core/core.h"
#include "dvar/sharding.h"

/* Python's // for b > 0: the floor, also for negative a. */
static int64_t floor_div(int64_t a, int64_t b)
{
	int64_t q = a / b;

	return (a % b != 0 && a < 0) ? q - 1 : q;
}

int dvar_embedding_locate(int strategy, int64_t rows, int64_t n, const int64_t *ids,
                          size_t count, int64_t *shard, int64_t *row)
{
	int64_t base, extra;

	if (strategy != DVAR_PARTITION_MOD && strategy != DVAR_PARTITION_DIV)
		/* TF's text, its missing space included. */
		return dvar_error_set(DVAR_EINVAL,
		                      "Unrecognized partition strategy: %d.Must be one of either "
		                      "`mod` or `div`.",
		                      strategy);
	if (n == 0)
		return dvar_error_set(DVAR_EINVAL,
		                      "Length of params is currently 0. Need at least one param.");
	if (n < 0)
		return dvar_error_set(DVAR_EINVAL, "embedding lookup: shard count %lld is negative",
		                      (long long)n);
	if (rows < 0)
		return dvar_error_set(DVAR_EINVAL, "embedding lookup: row count %lld is negative",
		                      (long long)rows);
	/* TF's div divides by rows / n, which is 0 here ("Integer division by
	 * zero" at run time); dvar_div_layout never makes such a layout. One
	 * empty shard of 0 rows is fine: it has no id to locate. */
	if (strategy == DVAR_PARTITION_DIV && n > (rows > 0 ? rows : 1))
		return dvar_error_set(DVAR_EINVAL,
		                      "embedding lookup: \"div\" over %lld shards needs at least %lld "
		                      "rows, not %lld (TensorFlow would divide by rows / shards = 0)",
		                      (long long)n, (long long)n, (long long)rows);
	if (count > 0 && (!ids || !shard || !row))
		return dvar_error_set(DVAR_EINVAL, "embedding lookup: %s is NULL",
		                      !ids ? "ids" : !shard ? "shard" : "row");
	/* Check every id before writing anything. */
	for (size_t k = 0; k < count; k++)
		if (ids[k] < 0 || ids[k] >= rows)
			return dvar_error_set(DVAR_EINVAL,
			                      "embedding lookup: id %lld at position %zu is outside "
			                      "[0, %lld)",
			                      (long long)ids[k], k, (long long)rows);

	if (strategy == DVAR_PARTITION_MOD || n == 1) {
		for (size_t k = 0; k < count; k++) {
			shard[k] = ids[k] % n;
			row[k] = ids[k] / n;
		}
		return DVAR_OK;
	}
	/* n >= 2 here, so base + 1 cannot overflow. */
	base = rows / n;
	extra = rows % n;

	for (size_t k = 0; k < count; k++) {
		int64_t id = ids[k];
		int64_t a = id / (base + 1), b = floor_div(id - extra, base);
		int64_t p = a > b ? a : b;

		shard[k] = p;
		row[k] = p < extra ? id % (base + 1) : (id - extra) % base;
	}
	return DVAR_OK;
}
