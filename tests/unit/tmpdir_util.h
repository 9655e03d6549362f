// Temporary directories of the unit tests that write real files (the
// store's tests).
#ifndef NMQ_TEST_TMPDIR_UTIL_H
#define NMQ_TEST_TMPDIR_UTIL_H

#include <dirent.h>
#include <stdio.h>
#include <unistd.h>

// Removes dir and the files in it (no subdirectories).
static inline void tmpdir_remove(const char *dir)
{
	DIR *d = opendir(dir);
	if (d != NULL) {
		struct dirent *e;
		while ((e = readdir(d)) != NULL) {
			if (e->d_name[0] != '.') {
				char p[600];
				snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
				unlink(p);
			}
		}
		closedir(d);
	}
	rmdir(dir);
}

#endif // NMQ_TEST_TMPDIR_UTIL_H
