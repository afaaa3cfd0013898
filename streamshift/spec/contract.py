"""The raw-row contract: columns every change carries besides the flow's own (no Spark).

Readers (EOD files, Kafka) produce rows of the flow's columns as text plus these; the write
path consumes them. Both sides import the names from here, not from each other.
"""

from __future__ import annotations

SOURCE = "_source"  # eod, kafka, replacement, eod_correction, ...
SOURCE_REF = "_source_ref"  # file:line, topic:partition:offset, ...
LOG_REF = "_log_ref"  # topic:partition:offset of a change delivered through Kafka, else null
RAW = "_raw"  # the payload as received
MALFORMED = "_malformed"  # optional: a rule name when the reader could not split the row
FAILED = "_failed_rules"  # set by the write path's validation
IS_DELETED = "is_deleted"  # stored: the row is a retraction of its key
APPLIED_AT = "_applied_at"  # stored: when the write path applied the version
# Optional: the names of fields a change held that the flow does not declare (counted, not
# stored).
UNKNOWN_FIELDS = "_unknown_fields"
# Kafka headers a producer of changes sets to say where they come from (an EOD correction
# produced to the topic keeps its file:line): the stream stores them as SOURCE and SOURCE_REF.
SOURCE_HEADER = "streamshift.source"
SOURCE_REF_HEADER = "streamshift.source_ref"
# The source of a whole-day replacement's synthetic cancels: each ranks below a real event of
# its version number, so the desk's own later version still wins.
REPLACEMENT_SOURCE = "replacement"
# The rule a delivery of a version held with other content is quarantined under.
VERSION_CONFLICT_RULE = "version_conflict"
# Where `streamshift serve`'s state processor runs (named here so the CLI's parser needs no
# Spark module: every command, the JVM-free reads among them, builds the whole parser).
SERVE_ENGINES = ("jvm", "python")
# The stream job's default micro-batch interval (`streamshift stream --trigger`), for the same
# reason. An idle query asks Kafka for new offsets at each trigger, about 5 ms of CPU each: at
# 200 ms a lone event waits 0.1 s for its batch on average (0.5 s at 1 s), for 2.7 instead of
# 1.5 CPU-s a minute while the stream waits (BENCHMARKS.md's trigger row).
STREAM_TRIGGER = "200 milliseconds"
