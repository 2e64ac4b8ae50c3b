/*
 * tests/unit/runtime/test_runtime_track.c - holds on a change tracker
 * (runtime/track.h): a mark waits while the tracker is held, doing the
 * holder's pieces of work meanwhile, and returns once released; a hold
 * without a helper is waited out; drain waits for the helpers.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "testutil.h"
#include "runtime/track.h"

/* A holder with `pieces` pieces of work; the last one done releases t. */
typedef struct {
	dvar_track *t;
	atomic_int next, done;
	int pieces;
	const dvar_track *asked; /* what the last help call was for */
} holder;

static int help(void *arg, const dvar_track *t)
{
	holder *h = arg;
	int k = atomic_fetch_add(&h->next, 1);

	h->asked = t;
	if (k >= h->pieces)
		return 0;
	if (atomic_fetch_add(&h->done, 1) + 1 == h->pieces)
		dvar_track_release(h->t);
	return 1;
}

static void test_track__mark_helps_then_marks(void **state)
{
	dvar_track t;
	holder h = { &t, 0, 0, 3, NULL };
	dvar_track_helper helper = { help, &h, 0 };

	(void)state;
	assert_int_equal(dvar_track_init(&t, 4), DVAR_OK);
	uint32_t snap = dvar_track_snapshot(&t);
	dvar_track_hold(&t, &helper);
	/* Nobody else works: the mark does all three pieces, then marks. */
	dvar_track_all(&t);
	assert_int_equal(atomic_load(&h.done), 3);
	assert_ptr_equal(h.asked, &t);
	assert_int_equal(atomic_load(&t.held), 0);
	assert_null(t.helper);
	assert_true(atomic_load(&t.whole) > snap);
	dvar_track_helper_drain(&helper);
	/* Released: marks go straight through, without help. */
	dvar_track_range(&t, 1, 2);
	assert_int_equal(atomic_load(&h.next), 3);
	dvar_track_fini(&t);
}

struct releaser {
	dvar_track *t;
	atomic_int released;
};

static void *release_later(void *arg)
{
	struct releaser *r = arg;

	usleep(20000);
	atomic_store(&r->released, 1);
	dvar_track_release(r->t);
	return NULL;
}

static void test_track__wait_without_helper(void **state)
{
	dvar_track t;
	struct releaser r = { &t, 0 };
	pthread_t th;
	int64_t row = 2;

	(void)state;
	assert_int_equal(dvar_track_init(&t, 4), DVAR_OK);
	dvar_track_hold(&t, NULL);
	dvar_track_hold(&t, NULL);
	dvar_track_release(&t); /* counted: still held once */
	assert_int_equal(pthread_create(&th, NULL, release_later, &r), 0);
	dvar_track_rows(&t, &row, 1);
	/* The mark returned only after the other thread released t. */
	assert_int_equal(atomic_load(&r.released), 1);
	assert_int_equal(atomic_load(&t.marks[2]), atomic_load(&t.epoch));
	pthread_join(th, NULL);
	dvar_track_fini(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_track__mark_helps_then_marks),
		cmocka_unit_test(test_track__wait_without_helper),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
