"""What a Ray worker is given: a batch task's settings travel as a Ray task's arguments, which Ray
keeps and shows (its dashboard, `ray list tasks`, its logs), so they hold nothing of the ledger."""

from __future__ import annotations

import pickle

from opencode_gateway.batch.ray_cluster import worker_settings
from opencode_gateway.config.settings import Settings

PASSWORD = "team-ledger-secret"
URL = f"postgresql://spend:{PASSWORD}@127.0.0.1:5432/spend"


def test_a_worker_is_given_neither_the_team_ledger_nor_its_password() -> None:
    environ = {"OPENCODE_GATEWAY_LEDGER": URL, "PGPASSWORD": PASSWORD, "PGPASSFILE": "/root/.pgpass", "HOME": "/h"}
    for model, ledger in (("openai/gpt-4o-mini", URL), ("litellm_proxy/team-a", None)):
        settings = Settings(model=model, api_base="http://127.0.0.1:4000", api_key="sk-1", ledger=ledger)
        for given in (settings.replace(environ=environ), settings.replace(environ=environ).validated()):
            shipped = worker_settings(given, {})
            assert PASSWORD.encode() not in pickle.dumps(shipped)
            assert shipped.ledger is None and shipped.environ is not None
            assert dict(shipped.environ) == {"HOME": "/h"}  # the rest of the environment travels as it did
            assert shipped.api_key == "sk-1"  # what the run needs, it still has
