"""Training runs as numbers: reading metric files (``read``), and the one judge of runs against
GOOD's seed spread (``judge``, with the sequential rule in ``stats``) that ``rlbisect compare``
(``compare``) and the short-run predicate share."""
