"""ctypes mirror of include/fulcrum/c_api.h (ABI 1.5).

Only the layout lives here; ownership rules are the header's and are applied
in balancer.py. The function table is read in two steps: its header
(struct_size, abi_major, abi_minor) first, then the v1.0 fields. A field a
later minor version appends is read only when the plugin's struct_size
covers it (see ``table_has``), so a 1.0 plugin keeps working with this
package and a newer plugin's extra functions simply go unused.
"""

import ctypes

ABI_MAJOR = 1
ABI_MINOR = 6
PLUGIN_ENTRY = "fulcrum_get_plugin"

# fulcrum_status
OK = 0
INVALID_ARGUMENT = 1
UNSUPPORTED = 2
NOT_FOUND = 3
INTERNAL = 4

STATUS_NAMES = {
    OK: "ok",
    INVALID_ARGUMENT: "invalid_argument",
    UNSUPPORTED: "unsupported",
    NOT_FOUND: "not_found",
    INTERNAL: "internal",
}

# fulcrum_mask_kind
MASK_CAUSAL = 0
MASK_FULL = 1
MASK_SLIDING = 2
MASK_PREFIX = 3
MASK_BLOCK_SPARSE = 4

# fulcrum_cost_kind
COST_TOKENS = 0
COST_ATTENTION = 1

# fulcrum_log_level
LOG_DEBUG = 0
LOG_INFO = 1
LOG_WARNING = 2
LOG_ERROR = 3

c_int64_p = ctypes.POINTER(ctypes.c_int64)
c_double_p = ctypes.POINTER(ctypes.c_double)

# The message as an address, not c_char_p: ctypes would read it to its NUL
# with no bound; the package reads at most its bound (balancer.py).
LogFn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p)


class HostServices(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("user_data", ctypes.c_void_p),
        ("log", LogFn),
    ]


class CpRequest(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("cp_size", ctypes.c_int32),
        ("tokens", ctypes.c_int64),
        ("block_size", ctypes.c_int64),
        ("doc_lengths", c_int64_p),
        ("num_docs", ctypes.c_int64),
        ("mask_kind", ctypes.c_int32),
        ("reserved0", ctypes.c_int32),
        ("mask_param", ctypes.c_int64),
        ("sparse_offsets", c_int64_p),
        ("sparse_kv_blocks", c_int64_p),
        ("strategy", ctypes.c_char_p),
        # ABI 1.5: cp_size weights for a strategy that takes them, or NULL.
        ("member_weights", c_double_p),
    ]


class CpPlan(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("cp_size", ctypes.c_int32),
        ("shard_len", ctypes.c_int64),
        ("positions", c_int64_p),
        ("padding", ctypes.c_int64),
        # Addresses, read within a bound and checked by the package.
        ("strategy_used", ctypes.c_void_p),
        ("fallback_reason", ctypes.c_void_p),
        ("rank_pairs", c_int64_p),
        ("rank_tiles", c_int64_p),
        ("plugin_data", ctypes.c_void_p),
    ]


class DpRequest(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("num_ranks", ctypes.c_int32),
        ("lengths", c_int64_p),
        ("num_samples", ctypes.c_int64),
        ("cost_kind", ctypes.c_int32),
        ("equal_count", ctypes.c_int32),
        ("attention_a", ctypes.c_double),
        ("strategy", ctypes.c_char_p),
    ]


class DpResult(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("num_ranks", ctypes.c_int32),
        ("rank_offsets", c_int64_p),
        ("samples", c_int64_p),
    ]


class ScheduleRequest(ctypes.Structure):
    """fulcrum_schedule_request (ABI 1.1; group_* and wave_multiple ABI 1.2;
    exchange_overlap ABI 1.3; answer_flags and row_token_seconds ABI 1.4;
    partial_tile_seconds ABI 1.6)."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("world_size", ctypes.c_int32),
        ("max_tokens_per_rank", ctypes.c_int64),
        ("doc_lengths", c_int64_p),
        ("num_docs", ctypes.c_int64),
        ("mask_kind", ctypes.c_int32),
        ("cp_size", ctypes.c_int32),
        ("mask_param", ctypes.c_int64),
        ("block_size", ctypes.c_int64),
        ("strategy", ctypes.c_char_p),
        ("profile_name", ctypes.c_char_p),
        ("tile_seconds", ctypes.c_double),
        ("token_seconds", ctypes.c_double),
        ("slot_seconds", ctypes.c_double),
        ("kv_bytes_per_token", ctypes.c_double),
        ("intra_node_bytes_per_second", ctypes.c_double),
        ("inter_node_bytes_per_second", ctypes.c_double),
        ("latency_seconds", ctypes.c_double),
        ("ranks_per_node", ctypes.c_int32),
        ("reserved0", ctypes.c_int32),
        ("group_sizes", ctypes.c_uint64),
        ("group_flags", ctypes.c_int32),
        ("wave_multiple", ctypes.c_int32),
        ("exchange_overlap", ctypes.c_double),
        ("answer_flags", ctypes.c_uint32),
        ("reserved_v1_4", ctypes.c_int32),
        ("row_token_seconds", ctypes.c_double),
        ("partial_tile_seconds", ctypes.c_double),
    ]


# ABI 1.2 group_flags bits (c_api.h FULCRUM_GROUPS_*).
GROUPS_WORLD = 1
GROUPS_ALIGNED = 2
GROUPS_EVERY_WAVE = 4

# ABI 1.4 answer_flags bit (c_api.h FULCRUM_ANSWER_COMPACT): slot plans by
# rule, positions NULL.
ANSWER_COMPACT = 1


c_int32_p = ctypes.POINTER(ctypes.c_int32)


class ScheduleAnswer(ctypes.Structure):
    """fulcrum_schedule (ABI 1.1; answer_flags ABI 1.4; the slots' member
    weights ABI 1.5): flat arrays owned by the plugin until release_schedule."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("num_slots", ctypes.c_int32),
        ("slot_rank_offsets", c_int64_p),
        ("ranks", c_int32_p),
        ("slot_piece_offsets", c_int64_p),
        ("piece_docs", c_int64_p),
        ("piece_starts", c_int64_p),
        ("piece_lengths", c_int64_p),
        ("slot_waves", c_int32_p),
        ("slot_shard_lens", c_int64_p),
        ("slot_padding", c_int64_p),
        ("positions", c_int64_p),
        ("slot_plan_strategies", ctypes.POINTER(ctypes.c_void_p)),
        ("strategy_used", ctypes.c_void_p),
        ("fallback_reason", ctypes.c_void_p),
        ("plugin_data", ctypes.c_void_p),
        ("answer_flags", ctypes.c_uint32),
        ("reserved_v1_4", ctypes.c_int32),
        ("slot_weight_offsets", c_int64_p),
        ("slot_weights", c_double_p),
    ]


CreateFn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(HostServices),
                            ctypes.POINTER(ctypes.c_void_p))
DestroyFn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
PlanCpFn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(CpRequest),
                            ctypes.POINTER(CpPlan))
ReleasePlanFn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(CpPlan))
PartitionDpFn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(DpRequest),
                                 ctypes.POINTER(DpResult))
# c_void_p, not c_char_p: the string is the plugin's and is decoded by hand,
# so that a NULL from a broken plugin is seen rather than turned into None.
LastErrorFn = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)


class TableHeader(ctypes.Structure):
    """The fields that open every version of the table."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("abi_major", ctypes.c_uint16),
        ("abi_minor", ctypes.c_uint16),
    ]


class PluginTableV1(ctypes.Structure):
    """fulcrum_plugin_v1 as of ABI 1.0. Later minors append fields after
    last_error; declare them in a subclass and read them through table_has."""

    _fields_ = TableHeader._fields_ + [
        ("name", ctypes.c_char_p),
        ("cp_strategies", ctypes.POINTER(ctypes.c_char_p)),
        ("num_cp_strategies", ctypes.c_int32),
        ("num_dp_strategies", ctypes.c_int32),
        ("dp_strategies", ctypes.POINTER(ctypes.c_char_p)),
        ("create", CreateFn),
        ("destroy", DestroyFn),
        ("plan_cp", PlanCpFn),
        ("release_plan", ReleasePlanFn),
        ("partition_dp", PartitionDpFn),
        ("last_error", LastErrorFn),
    ]


ScheduleFn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ScheduleRequest),
                              ctypes.POINTER(ScheduleAnswer))
ReleaseScheduleFn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(ScheduleAnswer))


class PluginTableV1_1(ctypes.Structure):
    """fulcrum_plugin_v1 with the fields ABI 1.1 appends: read only when the
    plugin's struct_size covers them."""

    _fields_ = PluginTableV1._fields_ + [
        ("schedule_strategies", ctypes.POINTER(ctypes.c_char_p)),
        ("num_schedule_strategies", ctypes.c_int32),
        ("reserved_v1_1", ctypes.c_int32),
        ("schedule", ScheduleFn),
        ("release_schedule", ReleaseScheduleFn),
    ]


def field_end(struct_type, field):
    """Offset just past `field`: the struct_size a table needs to hold it."""
    descriptor = getattr(struct_type, field)
    return descriptor.offset + descriptor.size


TABLE_HEADER_SIZE = ctypes.sizeof(TableHeader)
# The smallest table accepted: the end of v1.0's last field, never a sizeof
# that grows with later minors.
TABLE_V1_SIZE = field_end(PluginTableV1, "last_error")


def table_has(header_struct_size, struct_type, field):
    """True when a table of header_struct_size bytes holds `field`."""
    return header_struct_size >= field_end(struct_type, field)
