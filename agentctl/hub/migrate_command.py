"""`agentctl hub migrate`: brings a hub database (a SQLite file or a PostgreSQL database) to this agentctl's
schema version and exits; and where every hub command finds its database (--db, --db-file, the environment).
Exit codes as the other hub commands: 0 ok, 1 a bad location, 2 the database cannot be used or is refused.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from agentctl.cli_support import EXIT_NO_DAEMON, EXIT_OK, EXIT_USAGE, fail, print_json
from agentctl.hub.locations import ENV_HUB_DB, default_db
from agentctl.safetext import neutralize_data


def hub_location(db: str | None, db_file: str | None = None) -> Any:
    """--db / --db-file (or $AGENTCTL_HUB_DB, else the default file): a SqlitePath or a PostgresDsn. Warnings
    (a password in the command line) go to stderr. Raises DsnError, which never quotes a secret."""
    from agentctl.dsn_source import resolve_location

    resolved = resolve_location(db, db_file, ENV_HUB_DB, default_db)
    for warning in resolved.warnings:
        sys.stderr.write(f"agentctl: warning: {warning}\n")
    return resolved.location


def cmd_hub_migrate(args: argparse.Namespace) -> int:
    from agentctl.dsn import DsnError, PostgresDsn
    from agentctl.evidence.contract.hub import HubMigration, MigrationStep
    from agentctl.evidence.contract.report import CONTRACT_VERSION
    from agentctl.hub.hub_store import HubStore, HubStoreError
    from agentctl.hub.migrations import HUB
    from agentctl.migrations import MigrationError
    from agentctl.postgres import PostgresUnavailable, migrate_postgres

    try:
        location = hub_location(args.db, args.db_file)
    except DsnError as exc:
        return fail(str(exc), EXIT_USAGE)
    try:
        if isinstance(location, PostgresDsn):
            from agentctl.hub.pg_tasks import TASKS

            result = migrate_postgres(location, HUB)
            migrate_postgres(location, TASKS)  # the tool tunnel's task store shares the database
        else:
            existed = location.path.exists()
            store = HubStore(location.path)
            store.close()
            result = store.migration
    except (MigrationError, PostgresUnavailable, HubStoreError) as exc:
        return fail(str(exc), EXIT_NO_DAEMON)
    view = HubMigration(
        version=CONTRACT_VERSION, database=location.display(), engine=location.kind, schema_from=result.before,
        schema_to=result.after, schema_latest=result.latest, adopted=result.adopted,
        applied=[MigrationStep(version=v, description=d) for v, d in result.applied],
    )
    if args.json:
        print_json(view)
        return EXIT_OK
    created = not isinstance(location, PostgresDsn) and not existed
    sys.stdout.write(render_hub_migration(neutralize_data(view), created=created))
    return EXIT_OK


def render_hub_migration(view: Any, *, created: bool = False) -> str:
    if created:
        head = f"created hub database {view.database} at schema version {view.schema_to}"
    elif view.adopted:
        head = (f"hub database {view.database}: written before versioned migrations, recorded as schema version "
                f"{view.schema_from} as it is (nothing rewritten)")
    elif view.applied:
        head = f"hub database {view.database}: migrated from schema version {view.schema_from} to {view.schema_to}"
    else:
        head = f"hub database {view.database}: schema version {view.schema_to}, up to date"
    lines = [head] + [f"  applied {step.version}: {step.description}" for step in view.applied if not created]
    if view.adopted and view.applied:
        lines[0] += f", then migrated to {view.schema_to}"
    return "\n".join(lines) + "\n"
