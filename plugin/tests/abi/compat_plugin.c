/* Plugins of other ABI minor versions, in plain C11, one source compiled two
 * ways (see CMakeLists.txt). Both serve contiguous CP plans and round-robin
 * DP partitions, written from scratch here so they share nothing with the
 * SDK.
 *
 *   FULCRUM_COMPAT_v1_0        an ABI 1.0 plugin: its table's struct_size is
 *                              the pinned v1.0 size, and every byte past it
 *                              is poison, so a host that reads a 1.1 field
 *                              of it crashes instead of passing.
 *   FULCRUM_COMPAT_next_minor  a plugin built against a newer minor version
 *                              than this tree's: its table and the requests
 *                              it knows carry fields this host has never
 *                              heard of. It reads them only when the request's
 *                              struct_size covers them, and logs through the
 *                              host whether they were there.
 *
 * Compiling this file as C is itself a test: c_api.h's layout assertions must
 * hold for a C plugin as they do for the SDK. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fulcrum/c_api.h"

#if defined(FULCRUM_COMPAT_v1_0)
#define COMPAT_NAME "compat_v1_0"
#define COMPAT_MINOR 0
#elif defined(FULCRUM_COMPAT_next_minor)
#define COMPAT_NAME "compat_next_minor"
#define COMPAT_MINOR (FULCRUM_ABI_MINOR + 1)
#else
#error "define one FULCRUM_COMPAT_<kind> (see plugin/tests/abi/CMakeLists.txt)"
#endif

/* The newer minor's requests as its header would declare them: today's
 * fields, then appended ones. */
typedef struct next_cp_request {
  fulcrum_cp_request today;
  int64_t next_field;
} next_cp_request;
typedef struct next_dp_request {
  fulcrum_dp_request today;
  int64_t next_field;
} next_dp_request;
#define NEXT_CP_REQUEST_SIZE FULCRUM_STRUCT_SIZE(next_cp_request, next_field)
#define NEXT_DP_REQUEST_SIZE FULCRUM_STRUCT_SIZE(next_dp_request, next_field)

typedef struct compat_instance {
  fulcrum_host_services host;
  int has_host;
  char last_error[256];
} compat_instance;

static void say(compat_instance* inst, const char* message) {
  if (inst->has_host && inst->host.log != NULL) {
    inst->host.log(inst->host.user_data, FULCRUM_LOG_INFO, message);
  }
}

static fulcrum_status refuse(compat_instance* inst, fulcrum_status status, const char* why) {
  snprintf(inst->last_error, sizeof inst->last_error, "%s", why);
  return status;
}

static fulcrum_status compat_create(const fulcrum_host_services* host, void** instance) {
  compat_instance* inst;
  if (instance == NULL) return FULCRUM_INVALID_ARGUMENT;
  inst = (compat_instance*)calloc(1, sizeof *inst);
  if (inst == NULL) return FULCRUM_INTERNAL;
  if (host != NULL && host->struct_size >= FULCRUM_HOST_SERVICES_V1_0_SIZE) {
    memcpy(&inst->host, host, FULCRUM_HOST_SERVICES_V1_0_SIZE);
    inst->has_host = 1;
  }
  *instance = inst;
  return FULCRUM_OK;
}

static void compat_destroy(void* instance) { free(instance); }

/* Reports whether the appended field was sent, as a newer plugin must before
 * it relies on it. */
static void note_tail(compat_instance* inst, const char* what, uint32_t struct_size,
                      size_t next_size) {
  char line[160];
  snprintf(line, sizeof line, "%s struct_size %u: next_field %s", what, (unsigned)struct_size,
           struct_size >= next_size ? "present" : "absent");
  say(inst, line);
}

typedef struct compat_plan_buffers {
  int64_t* positions;
} compat_plan_buffers;

static fulcrum_status compat_plan_cp(void* instance, const fulcrum_cp_request* request,
                                     fulcrum_cp_plan* plan) {
  compat_instance* inst = (compat_instance*)instance;
  compat_plan_buffers* buffers;
  int64_t shard, i, total;
  if (inst == NULL) return FULCRUM_INVALID_ARGUMENT;
  if (request == NULL || plan == NULL || request->strategy == NULL) {
    return refuse(inst, FULCRUM_INVALID_ARGUMENT, "plan_cp called with a null argument");
  }
  if (request->struct_size < FULCRUM_CP_REQUEST_V1_0_SIZE ||
      plan->struct_size < FULCRUM_CP_PLAN_V1_0_SIZE) {
    return refuse(inst, FULCRUM_INVALID_ARGUMENT, "cp request or plan shorter than v1.0");
  }
  note_tail(inst, "cp request", request->struct_size, NEXT_CP_REQUEST_SIZE);
  if (strcmp(request->strategy, "contiguous") != 0) {
    return refuse(inst, FULCRUM_NOT_FOUND, "compat plugins know only 'contiguous'");
  }
  if (request->cp_size < 1 || request->tokens < 1) {
    return refuse(inst, FULCRUM_INVALID_ARGUMENT, "cp_size and tokens must be >= 1");
  }
  shard = (request->tokens + request->cp_size - 1) / request->cp_size;
  total = shard * request->cp_size;
  buffers = (compat_plan_buffers*)calloc(1, sizeof *buffers);
  if (buffers == NULL) return refuse(inst, FULCRUM_INTERNAL, "out of memory");
  buffers->positions = (int64_t*)malloc((size_t)total * sizeof(int64_t));
  if (buffers->positions == NULL) {
    free(buffers);
    return refuse(inst, FULCRUM_INTERNAL, "out of memory");
  }
  for (i = 0; i < total; ++i) buffers->positions[i] = i < request->tokens ? i : -1;
  plan->cp_size = request->cp_size;
  plan->shard_len = shard;
  plan->positions = buffers->positions;
  plan->padding = total - request->tokens;
  plan->strategy_used = "contiguous";
  plan->fallback_reason = NULL;
  plan->rank_pairs = NULL;
  plan->rank_tiles = NULL;
  plan->plugin_data = buffers;
  return FULCRUM_OK;
}

static void compat_release_plan(void* instance, fulcrum_cp_plan* plan) {
  compat_plan_buffers* buffers;
  (void)instance;
  if (plan == NULL) return;
  buffers = (compat_plan_buffers*)plan->plugin_data;
  if (buffers != NULL) {
    free(buffers->positions);
    free(buffers);
  }
  plan->plugin_data = NULL;
  plan->positions = NULL;
}

static fulcrum_status compat_partition_dp(void* instance, const fulcrum_dp_request* request,
                                          fulcrum_dp_result* result) {
  compat_instance* inst = (compat_instance*)instance;
  int64_t at = 0, r, i;
  if (inst == NULL) return FULCRUM_INVALID_ARGUMENT;
  if (request == NULL || result == NULL || request->strategy == NULL ||
      result->rank_offsets == NULL || result->samples == NULL) {
    return refuse(inst, FULCRUM_INVALID_ARGUMENT, "partition_dp called with a null argument");
  }
  if (request->struct_size < FULCRUM_DP_REQUEST_V1_0_SIZE ||
      result->struct_size < FULCRUM_DP_RESULT_V1_0_SIZE) {
    return refuse(inst, FULCRUM_INVALID_ARGUMENT, "dp request or result shorter than v1.0");
  }
  note_tail(inst, "dp request", request->struct_size, NEXT_DP_REQUEST_SIZE);
  if (strcmp(request->strategy, "round_robin") != 0) {
    return refuse(inst, FULCRUM_NOT_FOUND, "compat plugins know only 'round_robin'");
  }
  if (request->num_ranks < 1) return refuse(inst, FULCRUM_INVALID_ARGUMENT, "num_ranks < 1");
  result->num_ranks = request->num_ranks;
  for (r = 0; r < request->num_ranks; ++r) {
    result->rank_offsets[r] = at;
    for (i = r; i < request->num_samples; i += request->num_ranks) result->samples[at++] = i;
  }
  result->rank_offsets[request->num_ranks] = at;
  return FULCRUM_OK;
}

static const char* compat_last_error(void* instance) {
  compat_instance* inst = (compat_instance*)instance;
  return inst == NULL ? "null instance" : inst->last_error;
}

static const char* const kCpStrategies[] = {"contiguous"};
static const char* const kDpStrategies[] = {"round_robin"};

/* What an entry past the table's struct_size holds: never a usable pointer. */
#define POISON ((uintptr_t)0x5a5a5a5a5a5a5a5aULL)

#if defined(FULCRUM_COMPAT_next_minor)
/* The newer minor's table: today's table, then fields this host cannot know. */
typedef struct next_plugin_table {
  fulcrum_plugin_v1 today;
  void (*next_function)(void);
  int64_t next_field;
} next_plugin_table;

static void compat_next_function(void) { abort(); /* no host of this tree may call it */ }
#endif

typedef struct compat_table {
  fulcrum_plugin_v1 table;
  uintptr_t tail[8]; /* poison after a short table, unused after a long one */
} compat_table;

static compat_table kCompat;

FULCRUM_PLUGIN_API const fulcrum_plugin_v1* fulcrum_get_plugin(void) {
  fulcrum_plugin_v1* t = &kCompat.table;
  static int built = 0;
  if (built) return t;
  built = 1;
  memset(&kCompat, 0, sizeof kCompat);
#if defined(FULCRUM_COMPAT_v1_0)
  /* Bytes past the v1.0 table, the 1.1 fields included, hold poison. */
  memset((char*)t + FULCRUM_PLUGIN_V1_0_SIZE, 0x5a, sizeof kCompat - FULCRUM_PLUGIN_V1_0_SIZE);
  t->struct_size = FULCRUM_PLUGIN_V1_0_SIZE;
#else
  {
    next_plugin_table* next = (next_plugin_table*)(void*)&kCompat;
    FULCRUM_STATIC_ASSERT(sizeof(next_plugin_table) <= sizeof(compat_table),
                          "the next-minor table must fit the storage");
    next->next_function = &compat_next_function;
    next->next_field = (int64_t)POISON;
    t->struct_size = (uint32_t)FULCRUM_STRUCT_SIZE(next_plugin_table, next_field);
  }
#endif
  t->abi_major = FULCRUM_ABI_MAJOR;
  t->abi_minor = COMPAT_MINOR;
  t->name = COMPAT_NAME;
  t->cp_strategies = kCpStrategies;
  t->num_cp_strategies = 1;
  t->num_dp_strategies = 1;
  t->dp_strategies = kDpStrategies;
  t->create = &compat_create;
  t->destroy = &compat_destroy;
  t->plan_cp = &compat_plan_cp;
  t->release_plan = &compat_release_plan;
  t->partition_dp = &compat_partition_dp;
  t->last_error = &compat_last_error;
  return t;
}
