"""The keys of :class:`~resumable_data.checkpoint.state.TrainingState`'s state trees (the file
layout and the DCP layout), shared by the modules that read or write them."""

from __future__ import annotations

STATE_FORMAT = "resumable_data.training_state"
#: 2: values the codec tags (NumPy scalars and arrays, a tensor's memory order, ``torch.Size``,
#: ``OrderedDict``, ``Counter``, ``Parameter``, ``bytes``, ``complex``): an older reader refuses such a
#: state by its version instead of reading a tag as a plain dict (DCP has no marker to refuse it).
STATE_SCHEMA_VERSION = 2
#: Older state versions this reader still reads (version 1 holds none of version 2's tags).
STATE_OLDER_VERSIONS = (1,)

K_FORMAT = "format"
K_SCHEMA = "schema_version"
K_META = "meta"
K_MODEL = "model"
K_OPTIMIZER = "optimizer"
K_SCHEDULER = "scheduler"
K_SCALER = "scaler"
K_LOADER = "loader"
K_EMA = "ema"
K_CALLBACKS = "callbacks"
K_RNG = "rng"
K_GRADIENTS = "gradients"
K_MODES = "modes"
K_ACCUMULATION = "accumulation"
K_METRICS = "metrics"
K_ORACLES = "oracles"
#: The DCP layout (see the module docs).
K_LAYOUT = "layout"
K_JSON = "json"
K_TENSORS = "tensors"
K_RANKS = "ranks"
LAYOUT_DCP = "dcp"
_DCP_KEYS = frozenset({K_FORMAT, K_SCHEMA, K_LAYOUT, K_JSON, K_TENSORS})
#: Oracles that differ between ranks; the DCP layout keeps them in each rank's entry.
PER_RANK_ORACLES = frozenset({"next_batch", "rng.python", "rng.numpy", "rng.torch_cpu", "rng.cuda"})
_KEYS = frozenset(
    {
        K_FORMAT,
        K_SCHEMA,
        K_META,
        K_MODEL,
        K_OPTIMIZER,
        K_SCHEDULER,
        K_SCALER,
        K_LOADER,
        K_EMA,
        K_CALLBACKS,
        K_RNG,
        K_GRADIENTS,
        K_MODES,
        K_ACCUMULATION,
        K_METRICS,
        K_ORACLES,
    }
)
