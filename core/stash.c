/*
 * core/stash.c - a thread-safe stack of reusable buffers. The save and
 * restore paths take a chunk buffer per task and give it back, so that memory
 * whose pages are already faulted in is reused (fresh pages cost 4-5x more
 * than reused ones on the VMs we run on).
 */
#include <pthread.h>
#include <stdlib.h>

#include "core/core.h"

struct dvar_stash {
	pthread_mutex_t lock;
	void **items;
	size_t n, cap;
};

dvar_stash *dvar_stash_create(void)
{
	dvar_stash *s = calloc(1, sizeof(*s));
	if (s)
		pthread_mutex_init(&s->lock, NULL);
	return s;
}

void *dvar_stash_pop(dvar_stash *s)
{
	void *item = NULL;
	pthread_mutex_lock(&s->lock);
	if (s->n)
		item = s->items[--s->n];
	pthread_mutex_unlock(&s->lock);
	return item;
}

void dvar_stash_push(dvar_stash *s, void *item, void (*release)(void *))
{
	pthread_mutex_lock(&s->lock);
	void **p = dvar_grow(s->items, s->n, &s->cap, sizeof(void *), 8);
	if (!p) {
		pthread_mutex_unlock(&s->lock);
		release(item); /* nowhere to keep it */
		return;
	}
	s->items = p;
	s->items[s->n++] = item;
	pthread_mutex_unlock(&s->lock);
}

void dvar_stash_free(dvar_stash *s, void (*release)(void *))
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++)
		release(s->items[i]);
	free(s->items);
	pthread_mutex_destroy(&s->lock);
	free(s);
}
