/* The fulcrum plugin ABI: one exported C symbol returning a versioned table.
 *
 * A plugin is a shared library that exports
 *
 *     const fulcrum_plugin_v1* fulcrum_get_plugin(void);
 *
 * The host dlopen()s it with RTLD_NOW | RTLD_LOCAL, calls that function once,
 * and checks abi_major, struct_size and every required pointer before use.
 *
 * Rules for changing this file (read before editing):
 *   1. Never reorder, remove, resize or retype a field of a shipped struct.
 *   2. New fields go at the end of a struct, and bump FULCRUM_ABI_MINOR.
 *      Each shipped version's size is pinned below as FULCRUM_<STRUCT>_V1_<m>_SIZE:
 *      the offset of that version's last field plus the field's size
 *      (FULCRUM_STRUCT_SIZE), never sizeof, which grows with every append and
 *      counts trailing padding.
 *   3. Whoever allocates a struct sets struct_size to its newest pinned size.
 *      A reader accepts any struct_size of at least the v1.0 size, reads a
 *      field only when struct_size covers it (FULCRUM_HAS_FIELD), takes a
 *      field it cannot see as zero, and never writes past struct_size. So an
 *      old plugin keeps working under a new host and a new plugin under an
 *      old host, in both directions, for every minor version.
 *   4. Anything else (a changed meaning, a removed field) bumps
 *      FULCRUM_ABI_MAJOR; hosts refuse plugins of another major version.
 *   5. The FULCRUM_STATIC_ASSERTs at the end of this file pin every shipped
 *      size and offset, for C and C++ plugins alike; a new minor version adds
 *      its own and changes none.
 *   6. Arrays of structs cannot grow (their stride would change): answers
 *      are flat arrays of scalars, indexed by offset arrays.
 *
 * No C++ type, exception or allocator crosses this boundary. Every pointer
 * field says who owns it and how long it lives. Strings are NUL-terminated
 * UTF-8 without control characters: names (the plugin's, its strategies', a
 * strategy_used) at most 256 bytes, reasons and errors at most 4096; the host
 * refuses a name or reason that breaks this and escapes error and log text.
 * A `const` pointer in a request is read-only: the host lends copies and
 * refuses the answer of a plugin that wrote into them (docs/PLUGIN_ABI.md).
 */
#ifndef FULCRUM_C_API_H_
#define FULCRUM_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FULCRUM_ABI_MAJOR 1
#define FULCRUM_ABI_MINOR 6

/* Bytes of `type` up to the end of `field`: a shipped version's size when
 * `field` is that version's last field. A constant expression in C and C++. */
#define FULCRUM_STRUCT_SIZE(type, field) (offsetof(type, field) + sizeof(((const type*)0)->field))

/* Whether a struct of `type` whose struct_size is `size` holds `field`. */
#define FULCRUM_HAS_FIELD(type, field, size) ((size) >= FULCRUM_STRUCT_SIZE(type, field))

#if defined(__cplusplus)
#define FULCRUM_STATIC_ASSERT(condition, message) static_assert(condition, message)
#else
#define FULCRUM_STATIC_ASSERT(condition, message) _Static_assert(condition, message)
#endif

/* Name of the exported entry point, for dlsym. */
#define FULCRUM_PLUGIN_ENTRY "fulcrum_get_plugin"

#if defined(_WIN32)
#define FULCRUM_PLUGIN_API __declspec(dllexport)
#else
#define FULCRUM_PLUGIN_API __attribute__((visibility("default")))
#endif

typedef enum fulcrum_status {
  FULCRUM_OK = 0,
  FULCRUM_INVALID_ARGUMENT = 1, /* malformed request */
  FULCRUM_UNSUPPORTED = 2,      /* valid request this strategy cannot serve; host falls back */
  FULCRUM_NOT_FOUND = 3,        /* unknown strategy name */
  FULCRUM_INTERNAL = 4          /* anything else, including a caught exception */
} fulcrum_status;

typedef enum fulcrum_mask_kind {
  FULCRUM_MASK_CAUSAL = 0,
  FULCRUM_MASK_FULL = 1,
  FULCRUM_MASK_SLIDING = 2,     /* mask_param = window W >= 1 */
  FULCRUM_MASK_PREFIX = 3,      /* mask_param = prefix length L >= 0 */
  FULCRUM_MASK_BLOCK_SPARSE = 4 /* sparse_* fields describe the allowed tiles */
} fulcrum_mask_kind;

typedef enum fulcrum_cost_kind {
  FULCRUM_COST_TOKENS = 0,
  FULCRUM_COST_ATTENTION = 1 /* attention_a * L + L^2 */
} fulcrum_cost_kind;

typedef enum fulcrum_log_level {
  FULCRUM_LOG_DEBUG = 0,
  FULCRUM_LOG_INFO = 1,
  FULCRUM_LOG_WARNING = 2,
  FULCRUM_LOG_ERROR = 3
} fulcrum_log_level;

/* Services the host lends to a plugin instance. Owned by the host; valid from
 * create() until destroy() returns. Any function pointer may be NULL. */
typedef struct fulcrum_host_services {
  uint32_t struct_size;
  void* user_data; /* passed back to every callback; opaque to the plugin */
  void (*log)(void* user_data, int32_t level, const char* message);
} fulcrum_host_services;

/* One row of one micro-batch. Every pointer is borrowed from the host,
 * read-only, and valid only during the plan_cp call. */
typedef struct fulcrum_cp_request {
  uint32_t struct_size;
  int32_t cp_size;                 /* P >= 1 */
  int64_t tokens;                  /* N >= 1 */
  int64_t block_size;              /* B >= 1 */
  const int64_t* doc_lengths;      /* num_docs entries summing to N; may be NULL if num_docs == 0 */
  int64_t num_docs;                /* 0 means one document of N tokens */
  int32_t mask_kind;               /* fulcrum_mask_kind */
  int32_t reserved0;               /* zero */
  int64_t mask_param;              /* see fulcrum_mask_kind */
  const int64_t* sparse_offsets;   /* ceil(N/B) + 1 entries, only for BLOCK_SPARSE */
  const int64_t* sparse_kv_blocks; /* sparse_offsets[ceil(N/B)] entries */
  const char* strategy;            /* requested strategy name */
  /* ABI 1.5: cp_size weights, one per plan rank, for a strategy that takes
   * them (per_document_weighted: member r's share of every document), or
   * NULL: none. Each finite and >= 0, their sum > 0. A 1.4 host does not
   * send it and it reads as NULL; a strategy that takes no weights refuses
   * a request that carries them. */
  const double* member_weights;
} fulcrum_cp_request;

/* A plan written by the plugin. The host zero-initialises it and sets
 * struct_size; the plugin fills the rest. Every pointer the plugin stores is
 * owned by the plugin and stays valid until the host passes this struct to
 * release_plan (which the host does exactly once for every FULCRUM_OK). */
typedef struct fulcrum_cp_plan {
  uint32_t struct_size;
  int32_t cp_size;
  int64_t shard_len;           /* tokens per rank, padding included */
  int64_t* positions;          /* cp_size * shard_len entries, rank-major, -1 = pad */
  int64_t padding;             /* number of -1 entries */
  const char* strategy_used;   /* the strategy that produced the positions */
  const char* fallback_reason; /* NULL when the requested strategy served */
  const int64_t* rank_pairs;   /* cp_size entries, or NULL: the host computes work itself */
  const int64_t* rank_tiles;   /* cp_size entries, or NULL */
  void* plugin_data;           /* the plugin's own bookkeeping; the host never touches it */
} fulcrum_cp_plan;

/* A DP partition request. Pointers are borrowed, read-only, valid during the
 * call. */
typedef struct fulcrum_dp_request {
  uint32_t struct_size;
  int32_t num_ranks;      /* k >= 1 */
  const int64_t* lengths; /* num_samples entries, each >= 1 */
  int64_t num_samples;    /* n >= 1 */
  int32_t cost_kind;      /* fulcrum_cost_kind */
  int32_t equal_count;    /* nonzero: each rank gets floor(n/k) or ceil(n/k) samples */
  double attention_a;     /* only for FULCRUM_COST_ATTENTION */
  const char* strategy;
} fulcrum_dp_request;

/* The answer, written into buffers the host allocated and owns:
 * samples[rank_offsets[r] .. rank_offsets[r+1]) are rank r's sample indices. */
typedef struct fulcrum_dp_result {
  uint32_t struct_size;
  int32_t num_ranks;
  int64_t* rank_offsets; /* host-owned, num_ranks + 1 entries */
  int64_t* samples;      /* host-owned, num_samples entries: a permutation of [0, n) */
} fulcrum_dp_result;

/* ABI 1.1: hybrid placement (DESIGN.md section 6). One global batch of
 * documents over a world of world_size ranks, each holding at most
 * max_tokens_per_rank tokens in one slot. Every pointer is borrowed from the
 * host, read-only, and valid only during the schedule call. The cost coefficients are
 * those of fulcrum::CostProfile (times in seconds, sizes in bytes). */
typedef struct fulcrum_schedule_request {
  uint32_t struct_size;
  int32_t world_size;          /* W >= 1 */
  int64_t max_tokens_per_rank; /* T >= 1 */
  const int64_t* doc_lengths;  /* num_docs entries, each >= 1 */
  int64_t num_docs;            /* >= 1 */
  int32_t mask_kind;           /* fulcrum_mask_kind within each document; not BLOCK_SPARSE */
  int32_t cp_size;             /* the `fixed` scheduler's CP group size; 0 = choose */
  int64_t mask_param;          /* see fulcrum_mask_kind */
  int64_t block_size;          /* B >= 1 */
  const char* strategy;        /* requested scheduler name */
  const char* profile_name;    /* the cost profile's name, for messages; may be NULL */
  double tile_seconds;
  double token_seconds;
  double slot_seconds;
  double kv_bytes_per_token;
  double intra_node_bytes_per_second;
  double inter_node_bytes_per_second;
  double latency_seconds;
  int32_t ranks_per_node; /* >= 1 */
  int32_t reserved0;      /* zero */
  /* ABI 1.2: which groups the schedule may use, for hosts whose runtime has
   * only some communicators (fulcrum::GroupShapes). All zero: any group. */
  uint64_t group_sizes;  /* bit k: a slot may span 2^k ranks (0 and no WORLD flag: any size) */
  int32_t group_flags;   /* FULCRUM_GROUPS_* bits */
  int32_t wave_multiple; /* 0 or 1: any wave count; k > 1: a multiple of k (with EVERY_WAVE) */
  /* ABI 1.3: CostProfile::exchange_overlap, in [0, 1]; a 1.2 host does not
   * send it and it reads as 0 (no overlap: the cost model of ABI 1.2). */
  double exchange_overlap;
  /* ABI 1.4: FULCRUM_ANSWER_* bits, what the host will take back. A 1.3 host
   * does not send it and it reads as 0: the full answer. */
  uint32_t answer_flags;
  int32_t reserved_v1_4; /* zero */
  /* ABI 1.4: CostProfile::row_token_seconds, >= 0: seconds per token of a
   * slot's whole row that every member of the slot pays; a 1.3 host does not
   * send it and it reads as 0 (no such term: the cost model of ABI 1.3). */
  double row_token_seconds;
  /* ABI 1.6: CostProfile::partial_tile_seconds, >= 0: seconds per partial
   * tile on top of tile_seconds; a 1.5 host does not send it and it reads
   * as 0 (no such term: the cost model of ABI 1.5). */
  double partial_tile_seconds;
} fulcrum_schedule_request;

/* ABI 1.4 answer_flags bits (request and schedule). */
#define FULCRUM_ANSWER_COMPACT 1 /* slot plans by rule, positions NULL (fulcrum_schedule) */

/* ABI 1.2 group_flags bits. */
#define FULCRUM_GROUPS_WORLD 1      /* a slot of all W ranks is allowed (with no sizes: alone) */
#define FULCRUM_GROUPS_ALIGNED 2    /* a slot of g ranks is ranks [k g, (k + 1) g), in order */
#define FULCRUM_GROUPS_EVERY_WAVE 4 /* every rank holds one slot in every wave 0 .. last */

/* A schedule written by the plugin, as flat arrays (rule 6). The host
 * zero-initialises it and sets struct_size; the plugin fills the rest. Every
 * pointer is owned by the plugin and stays valid until the host passes this
 * struct to release_schedule, which the host does exactly once for every
 * FULCRUM_OK. With S = num_slots:
 *   slot s runs on ranks[slot_rank_offsets[s] .. slot_rank_offsets[s+1]) (g
 *   distinct ranks; plan rank i is the i-th of them), in wave slot_waves[s];
 *   its row is the pieces p in [slot_piece_offsets[s], slot_piece_offsets[s+1])
 *   packed in that order, piece p being tokens [piece_starts[p],
 *   piece_starts[p] + piece_lengths[p]) of document piece_docs[p];
 *   its CP plan over the g ranks is g * slot_shard_lens[s] positions in the
 *   row, rank-major, -1 = pad, slot_padding[s] of them pads, stored in
 *   `positions` right after the previous slot's. */
typedef struct fulcrum_schedule {
  uint32_t struct_size;
  int32_t num_slots;
  const int64_t* slot_rank_offsets;  /* S + 1 entries, from 0, non-decreasing */
  const int32_t* ranks;              /* slot_rank_offsets[S] entries, each in [0, W) */
  const int64_t* slot_piece_offsets; /* S + 1 entries, from 0, non-decreasing */
  const int64_t* piece_docs;         /* slot_piece_offsets[S] entries */
  const int64_t* piece_starts;       /* offset of the piece within its document */
  const int64_t* piece_lengths;
  const int32_t* slot_waves;               /* S entries, each >= 0 */
  const int64_t* slot_shard_lens;          /* S entries */
  const int64_t* slot_padding;             /* S entries */
  const int64_t* positions;                /* sum over s of g_s * slot_shard_lens[s] */
  const char* const* slot_plan_strategies; /* S entries, or NULL */
  const char* strategy_used;               /* the scheduler that produced it */
  const char* fallback_reason;             /* NULL when the requested scheduler served */
  void* plugin_data;                       /* the plugin's own bookkeeping */
  /* ABI 1.4. FULCRUM_ANSWER_COMPACT, set only when the request asked for it
   * and struct_size covers this field: `positions` is NULL and slot s's plan
   * is by rule: the plan this plugin's plan_cp answers for the strategy
   * slot_plan_strategies[s] (then never NULL) on the slot's row (its pieces'
   * lengths as documents, the request's mask and block size, cp_size = g),
   * with slot_shard_lens[s] and slot_padding[s] its shape. The host expands
   * only the slots it runs and refuses a plan that differs from the shape.
   * 0 (what a 1.3 plugin leaves): the full answer above. */
  uint32_t answer_flags;
  int32_t reserved_v1_4; /* zero */
  /* ABI 1.5, written only when struct_size covers them: the member weights
   * of slots whose rule takes them (per_document_weighted), for the host to
   * pass on as the cp request's member_weights when it expands the slot.
   * Slot s's are slot_weights[slot_weight_offsets[s] ..
   * slot_weight_offsets[s+1]): none (an empty range) or g_s of them. Both
   * NULL: no slot has weights. A 1.4 host's answer cannot hold them, and a
   * slot whose rule takes weights then comes back in full (positions). */
  const int64_t* slot_weight_offsets; /* S + 1 entries, from 0, non-decreasing, or NULL */
  const double* slot_weights;         /* slot_weight_offsets[S] entries, or NULL */
} fulcrum_schedule;

/* The function table. Static storage in the plugin: valid until dlclose. */
typedef struct fulcrum_plugin_v1 {
  uint32_t struct_size; /* the newest pinned size the plugin was built with */
  uint16_t abi_major;   /* FULCRUM_ABI_MAJOR the plugin was built against */
  uint16_t abi_minor;
  const char* name;                 /* static */
  const char* const* cp_strategies; /* static, num_cp_strategies entries */
  int32_t num_cp_strategies;
  int32_t num_dp_strategies;
  const char* const* dp_strategies; /* static, num_dp_strategies entries */

  /* Makes an instance. `host` is borrowed until destroy(). On FULCRUM_OK the
   * plugin stores an instance handle in *instance, which the host passes to
   * every other call and finally to destroy(). One instance is used by one
   * thread at a time. */
  fulcrum_status (*create)(const fulcrum_host_services* host, void** instance);
  void (*destroy)(void* instance);

  fulcrum_status (*plan_cp)(void* instance, const fulcrum_cp_request* request,
                            fulcrum_cp_plan* plan);
  void (*release_plan)(void* instance, fulcrum_cp_plan* plan);

  fulcrum_status (*partition_dp)(void* instance, const fulcrum_dp_request* request,
                                 fulcrum_dp_result* result);

  /* One line describing the last failure on this instance. Owned by the
   * plugin, valid until the next call on the instance. Never NULL. */
  const char* (*last_error)(void* instance);

  /* ABI 1.1. Read only when struct_size covers them. All optional: a plugin
   * without a scheduler sets schedule to NULL (and the host serves its
   * built-in fixed schedule from the plugin's CP plans); with one, it sets
   * schedule and release_schedule both. */
  const char* const* schedule_strategies; /* static, num_schedule_strategies entries */
  int32_t num_schedule_strategies;
  int32_t reserved_v1_1; /* zero */
  fulcrum_status (*schedule)(void* instance, const fulcrum_schedule_request* request,
                             fulcrum_schedule* schedule);
  void (*release_schedule)(void* instance, fulcrum_schedule* schedule);
} fulcrum_plugin_v1;

typedef const fulcrum_plugin_v1* (*fulcrum_get_plugin_fn)(void);

/* Shipped sizes. The smallest struct_size a reader accepts is the size in the
 * version that introduced the struct: v1.0, or v1.1 for the schedule structs. */
#define FULCRUM_HOST_SERVICES_V1_0_SIZE FULCRUM_STRUCT_SIZE(fulcrum_host_services, log)
#define FULCRUM_CP_REQUEST_V1_0_SIZE FULCRUM_STRUCT_SIZE(fulcrum_cp_request, strategy)
#define FULCRUM_CP_PLAN_V1_0_SIZE FULCRUM_STRUCT_SIZE(fulcrum_cp_plan, plugin_data)
#define FULCRUM_DP_REQUEST_V1_0_SIZE FULCRUM_STRUCT_SIZE(fulcrum_dp_request, strategy)
#define FULCRUM_DP_RESULT_V1_0_SIZE FULCRUM_STRUCT_SIZE(fulcrum_dp_result, samples)
#define FULCRUM_PLUGIN_V1_0_SIZE FULCRUM_STRUCT_SIZE(fulcrum_plugin_v1, last_error)
#define FULCRUM_PLUGIN_V1_1_SIZE FULCRUM_STRUCT_SIZE(fulcrum_plugin_v1, release_schedule)
#define FULCRUM_SCHEDULE_REQUEST_V1_1_SIZE FULCRUM_STRUCT_SIZE(fulcrum_schedule_request, reserved0)
#define FULCRUM_SCHEDULE_V1_1_SIZE FULCRUM_STRUCT_SIZE(fulcrum_schedule, plugin_data)
#define FULCRUM_SCHEDULE_REQUEST_V1_2_SIZE \
  FULCRUM_STRUCT_SIZE(fulcrum_schedule_request, wave_multiple)
#define FULCRUM_SCHEDULE_REQUEST_V1_3_SIZE \
  FULCRUM_STRUCT_SIZE(fulcrum_schedule_request, exchange_overlap)
#define FULCRUM_SCHEDULE_REQUEST_V1_4_SIZE \
  FULCRUM_STRUCT_SIZE(fulcrum_schedule_request, row_token_seconds)
#define FULCRUM_SCHEDULE_V1_4_SIZE FULCRUM_STRUCT_SIZE(fulcrum_schedule, reserved_v1_4)
#define FULCRUM_CP_REQUEST_V1_5_SIZE FULCRUM_STRUCT_SIZE(fulcrum_cp_request, member_weights)
#define FULCRUM_SCHEDULE_V1_5_SIZE FULCRUM_STRUCT_SIZE(fulcrum_schedule, slot_weights)
#define FULCRUM_SCHEDULE_REQUEST_V1_6_SIZE \
  FULCRUM_STRUCT_SIZE(fulcrum_schedule_request, partial_tile_seconds)

/* The layout is defined for LP64 targets; these pin every shipped size and
 * the offsets readers rely on. A failure here is an ABI break. */
FULCRUM_STATIC_ASSERT(sizeof(void*) == 8, "the fulcrum ABI is defined for 64-bit targets");
FULCRUM_STATIC_ASSERT(sizeof(double) == 8, "the fulcrum ABI needs an 8-byte double");
FULCRUM_STATIC_ASSERT(FULCRUM_HOST_SERVICES_V1_0_SIZE == 24, "fulcrum_host_services v1.0 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_host_services, user_data) == 8,
                      "fulcrum_host_services v1.0 moved");
FULCRUM_STATIC_ASSERT(FULCRUM_CP_REQUEST_V1_0_SIZE == 80, "fulcrum_cp_request v1.0 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_cp_request, doc_lengths) == 24,
                      "fulcrum_cp_request v1.0 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_cp_request, mask_param) == 48,
                      "fulcrum_cp_request v1.0 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_cp_request, sparse_kv_blocks) == 64,
                      "fulcrum_cp_request v1.0 moved");
FULCRUM_STATIC_ASSERT(FULCRUM_CP_PLAN_V1_0_SIZE == 72, "fulcrum_cp_plan v1.0 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_cp_plan, positions) == 16, "fulcrum_cp_plan v1.0 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_cp_plan, strategy_used) == 32, "fulcrum_cp_plan v1.0 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_cp_plan, rank_tiles) == 56, "fulcrum_cp_plan v1.0 moved");
FULCRUM_STATIC_ASSERT(FULCRUM_DP_REQUEST_V1_0_SIZE == 48, "fulcrum_dp_request v1.0 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_dp_request, cost_kind) == 24,
                      "fulcrum_dp_request v1.0 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_dp_request, attention_a) == 32,
                      "fulcrum_dp_request v1.0 moved");
FULCRUM_STATIC_ASSERT(FULCRUM_DP_RESULT_V1_0_SIZE == 24, "fulcrum_dp_result v1.0 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_dp_result, rank_offsets) == 8,
                      "fulcrum_dp_result v1.0 moved");
FULCRUM_STATIC_ASSERT(FULCRUM_PLUGIN_V1_0_SIZE == 88, "fulcrum_plugin_v1 v1.0 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_plugin_v1, name) == 8, "fulcrum_plugin_v1 v1.0 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_plugin_v1, num_cp_strategies) == 24,
                      "fulcrum_plugin_v1 v1.0 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_plugin_v1, dp_strategies) == 32,
                      "fulcrum_plugin_v1 v1.0 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_plugin_v1, create) == 40, "fulcrum_plugin_v1 v1.0 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_plugin_v1, plan_cp) == 56, "fulcrum_plugin_v1 v1.0 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_plugin_v1, partition_dp) == 72,
                      "fulcrum_plugin_v1 v1.0 moved");
FULCRUM_STATIC_ASSERT(FULCRUM_PLUGIN_V1_1_SIZE == 120, "fulcrum_plugin_v1 v1.1 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_plugin_v1, schedule_strategies) == 88,
                      "fulcrum_plugin_v1 v1.1 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_plugin_v1, schedule) == 104, "fulcrum_plugin_v1 v1.1 moved");
FULCRUM_STATIC_ASSERT(FULCRUM_SCHEDULE_REQUEST_V1_1_SIZE == 136,
                      "fulcrum_schedule_request v1.1 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_schedule_request, doc_lengths) == 16,
                      "fulcrum_schedule_request v1.1 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_schedule_request, strategy) == 56,
                      "fulcrum_schedule_request v1.1 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_schedule_request, tile_seconds) == 72,
                      "fulcrum_schedule_request v1.1 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_schedule_request, ranks_per_node) == 128,
                      "fulcrum_schedule_request v1.1 moved");
FULCRUM_STATIC_ASSERT(FULCRUM_SCHEDULE_V1_1_SIZE == 120, "fulcrum_schedule v1.1 moved");
FULCRUM_STATIC_ASSERT(FULCRUM_SCHEDULE_REQUEST_V1_2_SIZE == 152,
                      "fulcrum_schedule_request v1.2 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_schedule_request, group_sizes) == 136,
                      "fulcrum_schedule_request v1.2 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_schedule_request, group_flags) == 144,
                      "fulcrum_schedule_request v1.2 moved");
FULCRUM_STATIC_ASSERT(FULCRUM_SCHEDULE_REQUEST_V1_3_SIZE == 160,
                      "fulcrum_schedule_request v1.3 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_schedule_request, exchange_overlap) == 152,
                      "fulcrum_schedule_request v1.3 moved");
FULCRUM_STATIC_ASSERT(FULCRUM_SCHEDULE_REQUEST_V1_4_SIZE == 176,
                      "fulcrum_schedule_request v1.4 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_schedule_request, answer_flags) == 160,
                      "fulcrum_schedule_request v1.4 moved");
FULCRUM_STATIC_ASSERT(FULCRUM_SCHEDULE_V1_4_SIZE == 128, "fulcrum_schedule v1.4 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_schedule, answer_flags) == 120,
                      "fulcrum_schedule v1.4 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_schedule_request, row_token_seconds) == 168,
                      "fulcrum_schedule_request v1.4 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_schedule, slot_rank_offsets) == 8,
                      "fulcrum_schedule v1.1 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_schedule, slot_waves) == 56, "fulcrum_schedule v1.1 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_schedule, strategy_used) == 96,
                      "fulcrum_schedule v1.1 moved");
FULCRUM_STATIC_ASSERT(FULCRUM_CP_REQUEST_V1_5_SIZE == 88, "fulcrum_cp_request v1.5 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_cp_request, member_weights) == 80,
                      "fulcrum_cp_request v1.5 moved");
FULCRUM_STATIC_ASSERT(FULCRUM_SCHEDULE_V1_5_SIZE == 144, "fulcrum_schedule v1.5 moved");
FULCRUM_STATIC_ASSERT(FULCRUM_SCHEDULE_REQUEST_V1_6_SIZE == 184,
                      "fulcrum_schedule_request v1.6 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_schedule_request, partial_tile_seconds) == 176,
                      "fulcrum_schedule_request v1.6 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_schedule, slot_weight_offsets) == 128,
                      "fulcrum_schedule v1.5 moved");
FULCRUM_STATIC_ASSERT(offsetof(fulcrum_schedule, slot_weights) == 136,
                      "fulcrum_schedule v1.5 moved");

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FULCRUM_C_API_H_ */
