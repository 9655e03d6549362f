// The frames of a write-ahead log damaged in the middle; see store_int.h.
//
// SQLite reads a WAL up to the first frame whose checksum or salts do not
// match and takes the rest for the torn tail of a write that never
// completed, which after a crash is right (such a tail was never
// committed with its fsync, so never acknowledged). A frame damaged in the
// middle (a byte changed by hand or by the disk) ends the log there just
// the same, and every commit after it is dropped without a word, though
// their messages were acknowledged. Those later commits are recognisable:
// each frame carries the running checksum of the log up to itself, so a
// frame after the damaged one still verifies from its predecessor's
// stored checksum. This scan finds them and says so at error, keeping a
// copy of the log; SQLite then opens the database as it was before the
// damage (nothing more can be read back safely).
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "src/log/log.h"
#include "src/store/store_int.h"

#define WAL_HDR   32u
#define FRAME_HDR 24u

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

// SQLite's WAL checksum over n bytes (a multiple of 8), continued from
// s[2]; big: the words are big-endian (the magic's low bit), else little.
static void wal_cksum(const uint8_t *d, size_t n, bool big, uint32_t s[2])
{
	uint32_t s1 = s[0], s2 = s[1];
	for (size_t i = 0; i + 8 <= n; i += 8) {
		uint32_t a, b;
		if (big) {
			a = get32(d + i);
			b = get32(d + i + 4);
		} else {
			a = (uint32_t)d[i] | (uint32_t)d[i + 1] << 8 | (uint32_t)d[i + 2] << 16
			    | (uint32_t)d[i + 3] << 24;
			b = (uint32_t)d[i + 4] | (uint32_t)d[i + 5] << 8 | (uint32_t)d[i + 6] << 16
			    | (uint32_t)d[i + 7] << 24;
		}
		s1 += a + s2;
		s2 += b + s1;
	}
	s[0] = s1;
	s[1] = s2;
}

// Whether frame f (header and page of psz bytes) verifies from the
// running checksum seed, with the log's salts.
static bool frame_ok(const uint8_t *f, uint32_t psz, bool big, const uint32_t seed[2],
    uint32_t salt1, uint32_t salt2)
{
	if (get32(f + 8) != salt1 || get32(f + 12) != salt2) {
		return false;
	}
	uint32_t s[2] = { seed[0], seed[1] };
	wal_cksum(f, 8, big, s);
	wal_cksum(f + FRAME_HDR, psz, big, s);
	return s[0] == get32(f + 16) && s[1] == get32(f + 20);
}

void store_wal_check_frames(const char *path)
{
	char wal[4200];
	snprintf(wal, sizeof(wal), "%s-wal", path);
	FILE *fp = fopen(wal, "rb");
	if (fp == NULL) {
		return;
	}
	struct stat st;
	uint8_t    *d = NULL;
	if (fstat(fileno(fp), &st) != 0 || st.st_size <= (off_t)WAL_HDR
	    || st.st_size > ((off_t)1 << 31) || (d = malloc((size_t)st.st_size)) == NULL
	    || fread(d, 1, (size_t)st.st_size, fp) != (size_t)st.st_size) {
		free(d);
		fclose(fp);
		return;
	}
	fclose(fp);
	size_t   len   = (size_t)st.st_size;
	uint32_t magic = get32(d), psz = get32(d + 8);
	if ((magic & 0xFFFFFFFEu) != 0x377f0682u || psz < 512 || psz > 65536
	    || (psz & (psz - 1)) != 0) {
		free(d); // not a log check_wal lets through: SQLite's to judge
		return;
	}
	bool     big   = (magic & 1) != 0;
	uint32_t salt1 = get32(d + 16), salt2 = get32(d + 20);
	uint32_t s[2] = { 0, 0 };
	wal_cksum(d, 24, big, s);
	if (s[0] != get32(d + 24) || s[1] != get32(d + 28)) {
		free(d); // a header SQLite ignores: the whole log is stale to it
		return;
	}
	size_t fsz = FRAME_HDR + psz, n = (len - WAL_HDR) / fsz;
	size_t i = 0;
	for (; i < n; i++) {
		const uint8_t *f = d + WAL_HDR + i * fsz;
		if (!frame_ok(f, psz, big, s, salt1, salt2)) {
			break;
		}
		s[0] = get32(f + 16);
		s[1] = get32(f + 20);
	}
	// From the first frame SQLite will not read: later frames of this
	// log (its salts) that verify from their predecessor, and the
	// commits among them.
	size_t later = 0, commits = 0;
	for (size_t j = i + 1; j < n; j++) {
		const uint8_t *prev = d + WAL_HDR + (j - 1) * fsz, *f = d + WAL_HDR + j * fsz;
		uint32_t       seed[2] = { get32(prev + 16), get32(prev + 20) };
		if (frame_ok(f, psz, big, seed, salt1, salt2)) {
			later++;
			commits += get32(f + 4) != 0;
		}
	}
	free(d);
	if (commits == 0) {
		return; // a torn tail, or nothing after it: as SQLite reads it
	}
	time_t    t = time(NULL);
	struct tm tm;
	gmtime_r(&t, &tm);
	char stamp[32], to[4300];
	strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
	snprintf(to, sizeof(to), "%s.damaged-%s", wal, stamp);
	// A copy for inspection; SQLite reads the log itself up to the damage.
	FILE *in = fopen(wal, "rb"), *out = in != NULL ? fopen(to, "wb") : NULL;
	bool  copied = in != NULL && out != NULL;
	char  buf[65536];
	for (size_t r; copied && (r = fread(buf, 1, sizeof(buf), in)) > 0;) {
		copied = fwrite(buf, 1, r, out) == r;
	}
	if (out != NULL && fclose(out) != 0) {
		copied = false;
	}
	if (in != NULL) {
		fclose(in);
	}
	log_error("store",
	    "path=%s event=wal_damaged frame=%zu frames_after=%zu commits_lost=%zu copy=%s "
	    "lost=\"the commits of the write-ahead log from that frame on\": starting with the "
	    "database as it was before the damage",
	    path, i, later, commits, copied ? to : "none");
}
