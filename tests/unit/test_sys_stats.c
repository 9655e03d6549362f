// Unit test of the $SYS load averages (src/events/sys_stats.c): the
// exponential moving average of a per-minute rate.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>

#include "src/events/sys_stats.h"

static void test_load_average(void **state)
{
	(void)state;
	// A steady rate: every average converges to it, the shorter period
	// first.
	double a1 = 0, a15 = 0;
	for (int i = 0; i < 6; i++) { // one minute in 10 s steps
		a1  = sys_stats_load_update(a1, 120, 10, 60);
		a15 = sys_stats_load_update(a15, 120, 10, 900);
	}
	// After one period, 1 - 1/e of the way.
	assert_true(fabs(a1 - 120 * (1 - exp(-1))) < 1e-9);
	assert_true(a15 > 0 && a15 < a1);
	for (int i = 0; i < 6000; i++) {
		a1  = sys_stats_load_update(a1, 120, 10, 60);
		a15 = sys_stats_load_update(a15, 120, 10, 900);
	}
	assert_true(fabs(a1 - 120) < 1e-6);
	assert_true(fabs(a15 - 120) < 1e-3);
	// Traffic stops: the averages decay, by 1/e per period.
	double d = sys_stats_load_update(a1, 0, 60, 60);
	assert_true(fabs(d - a1 * exp(-1)) < 1e-9);
	// No time elapsed: unchanged.
	assert_true(sys_stats_load_update(7.5, 1000, 0, 60) == 7.5);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_load_average),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
