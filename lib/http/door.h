/*
 * lib/http's front door (internal to lib/http): it owns the listening
 * socket, peeks at the first request line of each new connection and hands
 * the connection to libmicrohttpd only when that line looks like HTTP;
 * garbage gets 400 and is closed at once, a line longer than 8 KiB gets 414
 * (libmicrohttpd closes one too long for its memory unanswered), a line that never ends gets 408
 * (or, with no byte at all, a silent close) after the head timeout.
 * libmicrohttpd 0.9.75 would instead hold some garbage until its timeout
 * and close other garbage without an answer.
 */
#ifndef KD_HTTP_DOOR_H
#define KD_HTTP_DOOR_H

#include <microhttpd.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/err.h"

struct kd_http_door;

/**
 * Listen on *sin and serve the door on its own thread until
 * kd_http__door_stop. With screen false (TLS: the bytes are encrypted)
 * connections are handed over at once. mhd (borrowed) must have been started
 * with MHD_USE_NO_LISTEN_SOCKET and MHD_USE_ITC and must outlive the door.
 * Returns 0, KD_EINVAL or -errno (-EADDRINUSE: the port is taken), with
 * detail in err.
 */
int kd_http__door_start(const struct sockaddr_in *sin, bool screen, unsigned head_timeout_s,
                        struct MHD_Daemon *mhd, struct kd_http_door **out, char *err) KD_WUR;

/** The TCP port the door listens on. */
int kd_http__door_port(const struct kd_http_door *d);

/** Stop accepting, close connections not yet handed over, join the thread, free. NULL-safe. */
void kd_http__door_stop(struct kd_http_door *d);

/** c is an RFC 9110 token character (methods and header names). */
bool kd_http__tchar(unsigned char c);

#endif
