"""The life of a DLQ row. An operator moves quarantined -> fixed or discarded; the graph does the rest."""

QUARANTINED = "quarantined"  # failed a rule; waiting for an operator
FIXED = "fixed"  # payload corrected by an operator; the outbox picks it up
RECYCLED = "recycled"  # handed to the outbox; re-validated by the recycled asset
DISCARDED = "discarded"  # closed by an operator, with a reason
EXHAUSTED = "exhausted"  # failed re-validation too many times; closed, with a reason

ALL = (QUARANTINED, FIXED, RECYCLED, DISCARDED, EXHAUSTED)
# Where a row's story ends (recycled: once it has landed); only these rows are ever purged.
RESOLVED = (RECYCLED, DISCARDED, EXHAUSTED)

# Change-feed row images that carry a row's state after a commit.
POST_IMAGES = ("insert", "update_postimage")
