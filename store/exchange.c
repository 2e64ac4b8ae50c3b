/*
 * store/exchange.c - how the workers of a save or restore agree: an
 * all-gather of a few bytes per worker, and on top of it an agreement on a
 * status (with the failing worker's message) that every worker receives.
 *
 * The gather is a dvar_strategy_run whose replicas call
 * dvar_replica_all_gather twice (lengths, then bytes); only local replica 0
 * of each worker contributes, the others bring zero rows. The run machinery
 * makes a failure on any replica fail the run on every worker, which is what
 * lets the callers treat a failed exchange as the same failure everywhere.
 *
 * Ownership: buffers returned through pointers are malloc'ed for the caller.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "store/store.h"

struct gather_job {
	const unsigned char *mine;
	size_t len;
	int W;
	int64_t *lens;       /* W: local replica 0 fills it */
	unsigned char *all;  /* local replica 0 allocates it */
	uint64_t total;
};

static int gather_replica(dvar_replica *ctx, void *arg)
{
	struct gather_job *j = arg;
	int first = dvar_replica_local_id(ctx) == 0;
	static const unsigned char none[8];
	int64_t mylen = (int64_t)j->len;
	int64_t *lens = j->lens;
	unsigned char *dst = NULL;
	dvar_shape shape = { .rank = 1, .dims = { first ? 1 : 0 } };
	uint64_t total = 0;
	int rc;

	/* The others receive the result too; each needs a place for it. */
	if (!first && !(lens = malloc((size_t)j->W * sizeof *lens)))
		return dvar_error_set(DVAR_ENOMEM, "exchange: out of memory");
	rc = dvar_replica_all_gather(ctx, DVAR_INT64, &shape, first ? (const void *)&mylen : none, 0,
	                             lens, (size_t)j->W * sizeof *lens, NULL);
	for (int w = 0; rc == DVAR_OK && w < j->W; w++)
		total += (uint64_t)lens[w];
	if (!first)
		free(lens);
	if (rc != DVAR_OK)
		return rc;
	if ((uint64_t)(size_t)total != total || !(dst = malloc(total ? (size_t)total : 1)))
		return dvar_error_set(DVAR_ENOMEM, "exchange: out of memory for %llu bytes",
		                      (unsigned long long)total);
	shape.dims[0] = first ? (int64_t)j->len : 0;
	rc = dvar_replica_all_gather(ctx, DVAR_UINT8, &shape, first && j->len ? j->mine : none, 0,
	                             dst, (size_t)total, NULL);
	if (first && rc == DVAR_OK) {
		j->all = dst;
		j->total = total;
	} else {
		free(dst);
	}
	return rc;
}

/* A worker that cannot take part still joins the run, with a replica that
 * fails, so that its peers' run fails too instead of waiting for it. */
static int fail_replica(dvar_replica *ctx, void *arg)
{
	return dvar_replica_local_id(ctx) == 0 ? dvar_error_set(DVAR_ENOMEM, "exchange: out of memory")
	                                       : DVAR_OK;
}

int dvar_store_all_gather(dvar_strategy *s, const void *mine, size_t len, unsigned char **all,
                           size_t *offs)
{
	int W = dvar_strategy_num_workers(s);
	struct gather_job j = { mine, len, W, NULL, NULL, 0 };
	int rc;

	*all = NULL;
	if (W == 1) {
		if (!(*all = malloc(len ? len : 1)))
			return dvar_error_set(DVAR_ENOMEM, "exchange: out of memory");
		if (len)
			memcpy(*all, mine, len);
		if (offs) {
			offs[0] = 0;
			offs[1] = len;
		}
		return DVAR_OK;
	}
	if (!(j.lens = malloc((size_t)W * sizeof *j.lens)))
		return dvar_strategy_run(s, fail_replica, NULL);
	rc = dvar_strategy_run(s, gather_replica, &j);
	if (rc == DVAR_OK) {
		for (int w = 0; offs && w <= W; w++)
			offs[w] = w ? offs[w - 1] + (size_t)j.lens[w - 1] : 0;
		*all = j.all;
	} else {
		free(j.all);
	}
	free(j.lens);
	return rc;
}

/* Each worker's contribution to an agreement: code, message, payload. */
#define AGREE_HEADER 8

int dvar_store_agree(dvar_strategy *s, int code, const void *payload, size_t len,
                      unsigned char **payloads, size_t *offs)
{
	int W = dvar_strategy_num_workers(s);
	const char *msg = code != DVAR_OK ? dvar_error_last()->message : "";
	size_t mlen = strnlen(msg, DVAR_ERROR_MESSAGE_MAX - 1);
	size_t *all_offs = malloc(((size_t)W + 1) * sizeof *all_offs);
	unsigned char *mine = malloc(AGREE_HEADER + mlen + len);
	static const char oom[] = "out of memory";
	unsigned char header[AGREE_HEADER + sizeof oom];
	unsigned char *all = NULL;
	int32_t c32 = code;
	uint32_t m32 = (uint32_t)mlen;
	int rc;

	if (payloads)
		*payloads = NULL;
	if (!all_offs || !mine) {
		/* Still take part, with a failure of its own. */
		free(all_offs);
		free(mine);
		c32 = DVAR_ENOMEM;
		m32 = (uint32_t)strlen(oom);
		memcpy(header, &c32, 4);
		memcpy(header + 4, &m32, 4);
		memcpy(header + AGREE_HEADER, oom, m32);
		if (W > 1 && dvar_store_all_gather(s, header, AGREE_HEADER + m32, &all, NULL) == DVAR_OK)
			free(all);
		return dvar_error_set(DVAR_ENOMEM, "agreement: out of memory");
	}
	memcpy(mine, &c32, 4);
	memcpy(mine + 4, &m32, 4);
	memcpy(mine + AGREE_HEADER, msg, mlen);
	if (len)
		memcpy(mine + AGREE_HEADER + mlen, payload, len);
	rc = dvar_store_all_gather(s, mine, AGREE_HEADER + mlen + len, &all, all_offs);
	free(mine);
	if (rc != DVAR_OK) {
		free(all_offs);
		return rc;
	}
	rc = DVAR_OK;
	for (int w = 0; w < W && rc == DVAR_OK; w++) {
		const unsigned char *p = all + all_offs[w];

		memcpy(&c32, p, 4);
		memcpy(&m32, p + 4, 4);
		if (c32 == DVAR_OK)
			continue;
		/* A positive code would read as success to a caller: keep it an error. */
		rc = c32 < 0 ? c32 : DVAR_ERROR;
		if (W > 1)
			dvar_error_set(rc, "worker %d: %.*s", w, (int)m32, (const char *)p + AGREE_HEADER);
		else
			dvar_error_set(rc, "%.*s", (int)m32, (const char *)p + AGREE_HEADER);
	}
	if (rc == DVAR_OK && payloads) {
		/* Keep only the payloads, packed in worker order. */
		size_t at = 0;

		for (int w = 0; w < W; w++) {
			size_t start = all_offs[w] + AGREE_HEADER, n;

			memcpy(&m32, all + all_offs[w] + 4, 4);
			start += m32;
			n = all_offs[w + 1] - start;
			memmove(all + at, all + start, n);
			offs[w] = at;
			at += n;
		}
		offs[W] = at;
		*payloads = all;
		all = NULL;
	}
	free(all);
	free(all_offs);
	return rc;
}

const char *dvar_store_sync_name(int sync)
{
	return sync == DVAR_SYNC_ON_READ ? DVAR_SYNC_NAME_ON_READ : DVAR_SYNC_NAME_ON_WRITE;
}

const char *dvar_store_agg_name(int agg)
{
	switch (agg) {
	case DVAR_AGG_SUM: return DVAR_AGG_NAME_SUM;
	case DVAR_AGG_MEAN: return DVAR_AGG_NAME_MEAN;
	case DVAR_AGG_ONLY_FIRST_REPLICA: return DVAR_AGG_NAME_ONLY_FIRST_REPLICA;
	default: return DVAR_AGG_NAME_NONE;
	}
}
