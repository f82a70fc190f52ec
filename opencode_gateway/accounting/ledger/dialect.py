"""What the two ledger backends spell differently: reading a metadata key, a run's tags as rows,
time buckets from Unix seconds, a list parameter, column types. Every other query is written once,
in the SQL both speak."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["POSTGRES", "SQLITE", "Dialect"]


@dataclass(frozen=True)
class Dialect:
    name: str
    _meta: str  # the text of metadata key ? of a JSON column {column} (a number as its JSON text)
    meta_param: Callable[[str], str]  # the parameter that names the key
    tags_join: str  # `tag.value`: one row per tag of `r`
    metadata_keys: str  # every key of every run's metadata
    _buckets: dict[str, str]  # day, week, month, hour of Unix seconds {t}
    _host: str  # the machine of an owner {column} (host:pid:start time, ledger/owners.py)
    in_list: str  # {column} is one of the list parameter ?
    list_param: Callable[[Sequence[str]], Any]
    no_limit: int | None  # LIMIT's "no limit"
    types: Callable[[str], str]  # a migration's column types, as this backend names them

    def meta(self, column: str) -> str:
        return self._meta.format(column=column)

    def bucket(self, size: str, seconds: str) -> str:
        return self._buckets[size].format(t=seconds)

    def host(self, column: str) -> str:
        return self._host.format(column=column)


SQLITE = Dialect(
    name="sqlite",
    _meta="CAST(json_extract({column}, ?) AS TEXT)",  # as Postgres's ->>: {"pr": 42} is "42" in both
    meta_param=lambda key: f'$."{key}"',
    tags_join=", json_each(r.tags) AS tag",
    metadata_keys="SELECT DISTINCT meta.key FROM runs, json_each(runs.metadata) AS meta",
    _buckets={
        "day": "date({t}, 'unixepoch')",
        "week": "strftime('%Y-W%W', {t}, 'unixepoch')",  # weeks from Monday, UTC
        "month": "strftime('%Y-%m', {t}, 'unixepoch')",
        "hour": "strftime('%Y-%m-%dT%H:00', {t}, 'unixepoch')",
    },
    _host="substr({column}, 1, instr({column}, ':') - 1)",
    in_list="{column} IN (SELECT value FROM json_each(?))",
    list_param=lambda values: json.dumps(list(values)),
    no_limit=-1,
    types=lambda sql: sql,
)

_UTC = "(to_timestamp({t}) AT TIME ZONE 'UTC')"
POSTGRES = Dialect(
    name="postgresql",
    _meta="(({column})::jsonb ->> ?)",
    meta_param=lambda key: key,
    tags_join=", jsonb_array_elements_text(r.tags::jsonb) AS tag(value)",
    metadata_keys="SELECT DISTINCT jsonb_object_keys(metadata::jsonb) FROM runs",
    _buckets={
        "day": f"to_char({_UTC}, 'YYYY-MM-DD')",
        # SQLite's %W: the week of the year, its first Monday starting week 01
        "week": f"(to_char({_UTC}, 'YYYY') || '-W' || lpad(floor((extract(doy FROM {_UTC}) + 7 - "
        f"extract(isodow FROM {_UTC})) / 7)::int::text, 2, '0'))",
        "month": f"to_char({_UTC}, 'YYYY-MM')",
        "hour": f"to_char({_UTC}, 'YYYY-MM-DD\"T\"HH24:00')",
    },
    _host="split_part({column}, ':', 1)",
    in_list="{column} = ANY(?)",
    list_param=list,
    no_limit=None,
    # REAL is 4 bytes in Postgres: costs and times need 8
    types=lambda sql: re.sub(r"\bREAL\b", "DOUBLE PRECISION", sql),
)
