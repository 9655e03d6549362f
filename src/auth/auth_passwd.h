// `nanomq passwd`: add, replace or delete one user of a HOCON password file
// (the file that `auth.password = {include "..."}` names), storing a new
// $7$ PBKDF2-SHA512 entry like Mosquitto 2.x's mosquitto_passwd does.
//
//   nanomq passwd [-c] <file> <user>               ask for the password on the tty
//   nanomq passwd [-c] -b <file> <user> <password> batch mode
//   nanomq passwd -D <file> <user>                 delete the user
//
// -c creates the file (replacing any existing one). Without -c the file
// must exist. The line of the user (`user: ...`, `"user" = ...`, also as
// written by mosquitto_passwd) is replaced in place; every other line is
// kept byte for byte; a user not found is appended. The file is rewritten
// through a temporary file in the same directory and rename(2), keeping its
// permission bits (0600 for a new file).
#ifndef NMQ_AUTH_PASSWD_H
#define NMQ_AUTH_PASSWD_H

// Bounds: the password file that is rewritten, and a password read from
// the terminal.
#define AUTH_PASSWD_MAX_FILE (4u << 20)
#define AUTH_PASSWD_MAX_TTY  1024

// Runs the command; argv[0] is the verb name ("passwd") and is skipped.
// Returns the process exit status: 0 on success, 1 on any error (usage,
// unreadable or oversized file, password mismatch, write failure), after
// printing one line to stderr. Called from the main thread before anything
// else runs; blocks on the terminal when asking for a password.
int auth_passwd_main(int argc, char **argv);

#endif // NMQ_AUTH_PASSWD_H
