"""Wire keys: every record name, config key and metric key exchanged by server and clients.

Defined once here; ``strategies/`` and ``clients/`` import them and never spell a key as a
literal. Keys are hyphenated, as Flower's own (``"num-examples"``, ``"server-round"``).

Protocol
--------
All messages carry at most one :class:`~flwr.app.ArrayRecord` under :data:`ARRAYS`, one
:class:`~flwr.app.ConfigRecord` under :data:`CONFIG` (server to client) and one
:class:`~flwr.app.MetricRecord` under :data:`METRICS` (client to server).

``query.profile`` (server -> client, :data:`PROFILE_ACTION`)
    Config: :data:`PROFILE_MODE` (``"quick"`` | ``"full"``).
    Reply: a ConfigRecord under :data:`PROFILE` with :data:`EVAL_CPU`, :data:`EVAL_GPU`,
    :data:`EVAL_MEMORY`, :data:`EVAL_DISK` (floats >= 0, seed formula 4),
    :data:`LOCAL_SAMPLES` (int, size of the node's local training data) and
    :data:`PROFILE_REPORT` (the full profiling report as a JSON string; never pickle).
    The edge strategy does not send this query: it asks with the first ``train`` message
    instead (below), so that an unmodified Flower app never gets a message it cannot handle.


``train`` (server -> client)
    Arrays: the global model, present only when it is newer than what the node has.
    Config: :data:`SERVER_ROUND`, :data:`GLOBAL_VERSION`, :data:`JOB_ID`,
    :data:`SAMPLE_SHARE`, :data:`SLICE_BUDGET`, :data:`MATCH_RATIO`, :data:`RESOURCE`
    (the node's ``R`` on the linear scale, ``sqrt(m / max m)``, before availability),
    :data:`THETA` (the abandon threshold: the user's, or the one the server derives from the
    live scores, :func:`flower_edge.decision.derive_theta`),
    :data:`VALUE_NODE_IDS` / :data:`VALUES` (parallel lists) and :data:`VALUES_ROUND`,
    :data:`SEND_TIME` (server clock, seconds; virtual seconds under a virtual clock).
    The first message to a node also carries :data:`PROFILE_MODE`: a flower-edge client
    answers it with its profile only (the ``query.profile`` reply, no arrays) and then gets
    its job; an unmodified Flower app trains on it, and its update counts as usual (the node
    runs with an equal share). With :data:`PROFILE_WITH_JOB` true as well (the default under
    a wall clock), a flower-edge client trains that first job too and attaches its profile
    to the train reply (the ConfigRecord :data:`PROFILE` beside the reply's metrics): the
    profile then costs no round trip of its own.

    The client keeps its job in ``context.state`` tagged with the job id. A message whose job
    id differs from the stored one starts a new job from the arrays it carries. A message with
    the same job id is a preemption point: training resumes; if its global version is newer
    than the job's base version, the client takes the abandon decision
    (``score = alpha * R + (1 - alpha) * V >= theta`` -> restart from the new global).

    Reply metrics: :data:`NUM_EXAMPLES`, :data:`DONE` (1 = finished update with arrays,
    0 = progress report without arrays), :data:`JOB_ID`, :data:`BASE_VERSION`,
    :data:`SAMPLES_PROCESSED`, :data:`TRAIN_SECONDS`, :data:`ABANDONED` (1 if this slice
    abandoned the stale job), :data:`ABANDONED_JOBS` (total), :data:`TRAIN_LOSS`,
    :data:`AVAILABILITY` (the node's availability in [0, 1] as it replied), and under a
    virtual clock :data:`VIRTUAL_SECONDS` (the virtual duration of this slice, transfers
    included). A reply from an unmodified Flower ClientApp carries only arrays and
    :data:`NUM_EXAMPLES`: it is read as a finished update of the job it was sent.

``evaluate`` (server -> client)
    Arrays: the global model. Reply metrics: :data:`NUM_EXAMPLES`, :data:`EVAL_LOSS`,
    :data:`EVAL_ACCURACY`.
"""

from __future__ import annotations

from typing import Final

# ---------------------------------------------------------------- record names
ARRAYS: Final = "arrays"
CONFIG: Final = "config"
METRICS: Final = "metrics"
PROFILE: Final = "profile"

# ---------------------------------------------------------------- message actions
PROFILE_ACTION: Final = "profile"  # registered with ``@app.query(PROFILE_ACTION)``
PROFILE_MESSAGE_TYPE: Final = "query.profile"

# ---------------------------------------------------------------- profile query / reply
PROFILE_MODE: Final = "profile-mode"
#: train config: answer the profile request *and* train the job (profile beside the reply)
PROFILE_WITH_JOB: Final = "profile-with-job"
EVAL_CPU: Final = "evaluation-cpu"
EVAL_GPU: Final = "evaluation-gpu"
EVAL_MEMORY: Final = "evaluation-memory"
EVAL_DISK: Final = "evaluation-disk"
EVAL_KEYS: Final = {"cpu": EVAL_CPU, "gpu": EVAL_GPU, "memory": EVAL_MEMORY, "disk": EVAL_DISK}
LOCAL_SAMPLES: Final = "local-samples"
PROFILE_REPORT: Final = "profile-report"

# ---------------------------------------------------------------- train config (server -> client)
SERVER_ROUND: Final = "server-round"
GLOBAL_VERSION: Final = "global-version"
JOB_ID: Final = "job-id"
SAMPLE_SHARE: Final = "sample-share"
SLICE_BUDGET: Final = "slice-budget"  # seconds of training per message; 0 = no slicing
MATCH_RATIO: Final = "match-ratio"
RESOURCE: Final = "resource"  # R in [0, 1] of the abandon rule, before availability
THETA: Final = "theta"  # abandon threshold the client applies
VALUE_NODE_IDS: Final = "value-node-ids"
VALUES: Final = "values"
VALUES_ROUND: Final = "values-round"
SEND_TIME: Final = "send-time"
#: the config keys the strategies set in train messages besides :data:`SERVER_ROUND` (which
#: Flower's FedAvg sets too): a ``train_config`` that holds one would have its value replaced
TRAIN_CONFIG_KEYS: Final = frozenset(
    {
        GLOBAL_VERSION,
        JOB_ID,
        SAMPLE_SHARE,
        SLICE_BUDGET,
        MATCH_RATIO,
        RESOURCE,
        THETA,
        VALUE_NODE_IDS,
        VALUES,
        VALUES_ROUND,
        SEND_TIME,
        PROFILE_MODE,
        PROFILE_WITH_JOB,
    }
)

# ---------------------------------------------------------------- train reply (client -> server)
NUM_EXAMPLES: Final = "num-examples"
DONE: Final = "done"
BASE_VERSION: Final = "base-version"
SAMPLES_PROCESSED: Final = "samples-processed"
TRAIN_SECONDS: Final = "train-seconds"
ABANDONED: Final = "abandoned"
ABANDONED_JOBS: Final = "abandoned-jobs"
TRAIN_LOSS: Final = "train-loss"
VIRTUAL_SECONDS: Final = "virtual-seconds"
#: the node's availability in [0, 1] when it replied (what scales its R in the abandon rule)
AVAILABILITY: Final = "availability"
#: the protocol's own metrics of a train reply; any other number a ClientApp sends (e.g. the
#: quickstart's ``train_loss``) is the app's own and is averaged into the train metrics
TRAIN_REPLY_KEYS: Final = frozenset(
    {
        NUM_EXAMPLES,
        DONE,
        JOB_ID,
        BASE_VERSION,
        SAMPLES_PROCESSED,
        TRAIN_SECONDS,
        ABANDONED,
        ABANDONED_JOBS,
        TRAIN_LOSS,
        VIRTUAL_SECONDS,
        AVAILABILITY,
    }
)

# ---------------------------------------------------------------- evaluate reply
EVAL_LOSS: Final = "eval-loss"
EVAL_ACCURACY: Final = "eval-accuracy"

# ---------------------------------------------------------------- node config (--node-config)
PARTITION_ID: Final = "partition-id"
NUM_PARTITIONS: Final = "num-partitions"
#: a folder where the flower-edge ClientApp keeps (and reuses) the device's profile reports,
#: ``profile-<mode>.json`` (``flower-edge profile --cache FOLDER`` writes one at enrollment)
PROFILE_CACHE: Final = "profile-cache"
#: seconds a stored profile report is reused (default one day)
PROFILE_MAX_AGE: Final = "profile-max-age"
