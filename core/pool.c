/*
 * core/pool.c - a pool of worker threads for parallel loops (checksum,
 * compress, copy). dvar_pool_for hands out task indices through an atomic
 * counter; the calling thread works too, so a pool of size n runs up to n-1
 * workers. They start on the first loop that needs them, not with the pool:
 * a reader that only lists its variables or reads small ones one chunk at a
 * time never pays for threads (about 60 us each to start on a VM, most of
 * an open). A worker that cannot start leaves its tasks to the others and
 * the caller. A task must not call dvar_pool_for on its own pool: it would
 * wait for itself.
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"

typedef struct {
	dvar_pool *pool;
	pthread_t thread;
	uint64_t born; /* the generation when it started: it joins the loops after */
} worker;

struct dvar_pool {
	int size;
	int nworkers; /* started; only a caller holding call_lock starts more */
	worker *workers;
	pthread_mutex_t call_lock; /* one dvar_pool_for at a time */

	pthread_mutex_t lock; /* guards everything below */
	pthread_cond_t work_cv;
	pthread_cond_t done_cv;
	uint64_t generation; /* bumped to start a loop */
	int stop;
	int busy; /* workers still inside the current loop */

	/* The current loop. */
	int (*fn)(void *ctx, size_t i);
	void *ctx;
	size_t n;
	atomic_size_t next;
	int seats;        /* workers that may still join it (width - 1 at the start) */

	/* Its first failure in task order. */
	size_t fail_index;
	int fail_code;
	char fail_message[DVAR_ERROR_MESSAGE_MAX];
};

static void record_failure(dvar_pool *pool, size_t i, int rc)
{
	pthread_mutex_lock(&pool->lock);
	if (i < pool->fail_index) {
		pool->fail_index = i;
		pool->fail_code = rc;
		/* The message lives in this thread's record; the caller cannot see it. */
		strcpy(pool->fail_message, dvar_error_last()->message);
	}
	pthread_mutex_unlock(&pool->lock);
}

static void run_tasks(dvar_pool *pool)
{
	for (;;) {
		size_t i = atomic_fetch_add_explicit(&pool->next, 1, memory_order_relaxed);
		int rc;

		if (i >= pool->n)
			return;
		dvar_error_clear();
		rc = pool->fn(pool->ctx, i);
		if (rc != DVAR_OK)
			record_failure(pool, i, rc);
	}
}

static void *worker_main(void *arg)
{
	dvar_pool *pool = ((worker *)arg)->pool;
	uint64_t seen = ((worker *)arg)->born;

	pthread_mutex_lock(&pool->lock);
	for (;;) {
		while (!pool->stop && pool->generation == seen)
			pthread_cond_wait(&pool->work_cv, &pool->lock);
		if (pool->stop)
			break;
		seen = pool->generation;
		int join = pool->seats > 0;
		pool->seats -= join;
		pthread_mutex_unlock(&pool->lock);
		if (join)
			run_tasks(pool);
		pthread_mutex_lock(&pool->lock);
		if (--pool->busy == 0)
			pthread_cond_signal(&pool->done_cv);
	}
	pthread_mutex_unlock(&pool->lock);
	return NULL;
}

static void stop_workers(dvar_pool *pool)
{
	pthread_mutex_lock(&pool->lock);
	pool->stop = 1;
	pthread_cond_broadcast(&pool->work_cv);
	pthread_mutex_unlock(&pool->lock);
	for (int i = 0; i < pool->nworkers; i++)
		pthread_join(pool->workers[i].thread, NULL);
}

/* Workers up to want, as many as start (the caller holds call_lock). */
static void start_workers(dvar_pool *pool, int want)
{
	for (; pool->nworkers < want; pool->nworkers++) {
		worker *w = &pool->workers[pool->nworkers];

		w->pool = pool;
		w->born = pool->generation;
		if (pthread_create(&w->thread, NULL, worker_main, w))
			break;
	}
}

int dvar_cpus(void)
{
	static atomic_int cpus; /* 0: not counted yet; racing first calls count alike */
	int n = atomic_load(&cpus);
	if (!n) {
		long c = sysconf(_SC_NPROCESSORS_ONLN);
		n = c > 0 && c < INT_MAX ? (int)c : 1;
		atomic_store(&cpus, n);
	}
	return n;
}

int dvar_pool_io_threads(int threads)
{
	if (threads > 0)
		return threads;
	return dvar_cpus() + DVAR_IO_DEPTH;
}

int dvar_pool_create(dvar_pool **out, int n)
{
	dvar_pool *pool;

	if (n <= 0)
		n = dvar_cpus();
	pool = calloc(1, sizeof *pool);
	if (!pool)
		return dvar_error_set(DVAR_ENOMEM, "thread pool: out of memory");
	pool->size = n;
	pool->workers = calloc((size_t)n, sizeof *pool->workers);
	if (!pool->workers) {
		free(pool);
		return dvar_error_set(DVAR_ENOMEM, "thread pool of %d: out of memory", n);
	}
	pthread_mutex_init(&pool->call_lock, NULL);
	pthread_mutex_init(&pool->lock, NULL);
	pthread_cond_init(&pool->work_cv, NULL);
	pthread_cond_init(&pool->done_cv, NULL);
	*out = pool;
	return DVAR_OK;
}

void dvar_pool_free(dvar_pool *pool)
{
	if (!pool)
		return;
	stop_workers(pool);
	pthread_cond_destroy(&pool->done_cv);
	pthread_cond_destroy(&pool->work_cv);
	pthread_mutex_destroy(&pool->lock);
	pthread_mutex_destroy(&pool->call_lock);
	free(pool->workers);
	free(pool);
}

int dvar_pool_size(const dvar_pool *pool)
{
	return pool->size;
}

int dvar_pool_for(dvar_pool *pool, size_t n, int (*fn)(void *ctx, size_t i), void *ctx)
{
	return dvar_pool_for_width(pool, n, 0, fn, ctx);
}

int dvar_pool_for_width(dvar_pool *pool, size_t n, int width, int (*fn)(void *ctx, size_t i),
                        void *ctx)
{
	int rc = DVAR_OK;

	if (n == 0)
		return DVAR_OK;
	pthread_mutex_lock(&pool->call_lock);
	pool->fn = fn;
	pool->ctx = ctx;
	pool->n = n;
	pool->fail_index = SIZE_MAX;
	atomic_store_explicit(&pool->next, 0, memory_order_relaxed);
	if (width <= 0 || width > pool->size)
		width = pool->size;
	if ((size_t)width > n)
		width = (int)n;
	if (width > 1)
		start_workers(pool, width - 1);
	/* One task, or one thread, needs no wake-ups. */
	if (pool->nworkers > 0 && width > 1) {
		pthread_mutex_lock(&pool->lock);
		pool->busy = pool->nworkers;
		pool->seats = width - 1;
		pool->generation++;
		pthread_cond_broadcast(&pool->work_cv);
		pthread_mutex_unlock(&pool->lock);
		run_tasks(pool);
		pthread_mutex_lock(&pool->lock);
		while (pool->busy > 0)
			pthread_cond_wait(&pool->done_cv, &pool->lock);
		pthread_mutex_unlock(&pool->lock);
	} else {
		run_tasks(pool);
	}
	if (pool->fail_index != SIZE_MAX)
		rc = dvar_error_restore(pool->fail_code, pool->fail_message);
	pthread_mutex_unlock(&pool->call_lock);
	return rc;
}

size_t dvar_segment_of(const uint64_t *first, size_t n, uint64_t pos)
{
	size_t lo = 0, hi = n;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (first[mid] <= pos)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}
