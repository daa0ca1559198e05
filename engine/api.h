/*
 * api.h - the worker's HTTP API under /v1/ (docs/openapi.yaml): create a
 * run, read it (long-polling with ?wait=), signal, cancel and retry, as
 * JSON, through libcairn's client, so the HTTP path validates, places and
 * wakes runs exactly as the C client does. status.c routes /v1 requests
 * here once route.c has checked the bearer token (the API is off while no
 * CAIRN_HTTP_TOKEN is set).
 *
 * Owns: a small pool of client connections (at most API_CLIENTS open at
 * once, shared with the signal links), and the stop flag that ends long
 * polls when the worker drains. Called on the HTTP server's connection
 * threads, several at a time.
 */
#ifndef CAIRN_API_H
#define CAIRN_API_H
#include "http.h"
#include "seal.h"

/* Database connections the HTTP API and the signal links use at most. */
#define API_CLIENTS 4
/* The longest ?wait= of GET /v1/runs/ID. */
#define API_WAIT_MAX_MS 60000
/* The most runs POST /v1/runs takes in one request (an array). */
#define API_BATCH_MAX 1000

typedef struct api api;

/* Connects lazily to database_url; keys (may be NULL) stay the caller's. */
int api_new(const char *database_url, const seal_keys *keys, api **out);
/* Ends long polls (they answer with the run as it is) and makes new ones
 * return at once; the worker calls it before it stops the server. */
void api_stop(api *a);
void api_free(api *a);

/* A client from the pool (opened if needed), or NULL with the reason in
 * why (none free within 5 s, or the database unreachable). */
struct cairn_client *api_client_take(api *a, char *why, size_t n);
/* Gives it back; rc is what the last call on it returned (a connection
 * error closes it instead). */
void api_client_give(api *a, struct cairn_client *c, int rc);

/* Answers a request for /v1 + sub (sub "" or "/runs..."). */
void api_handle(api *a, const http_request *q, const char *sub, http_reply *r);
/* Replies o (deleted here; NULL: out of memory) as JSON with status. */
void api_reply(http_reply *r, unsigned status, struct cJSON *o);
/* A JSON reply {"error": why}, the shape of every /v1 and signal-link error. */
void api_error(http_reply *r, unsigned status, const char *why);
/* Whether the body is JSON text as the client takes it (parse_check_json_n,
 * what names it): 0, or -1 after a 400 that says why. Checked here, where
 * the body's length is known: a NUL byte inside it would end the C string
 * the client sees, and cut the value short. */
int api_check_body(const http_request *q, const char *what, http_reply *r);
/* The HTTP status of a cairn_status from the client. */
unsigned api_status_of(int rc);
#endif
