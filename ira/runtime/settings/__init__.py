"""ira's configuration: one YAML file, then environment overrides, validated once.

Nothing here reads ``os.environ``: the composition root calls ``load_settings(os.environ)``
and tests pass plain dicts. Invalid input never reaches a role; it becomes a
:class:`~ira.core.errors.ConfigError` naming the dotted key (``http.port``, ``sources.1.kind``).

With no config file the development defaults apply, and those defaults *are* the file
``ira init`` writes (``template.yaml``), so the two cannot drift. A config file replaces
them wholesale: a production file that leaves out ``sources`` gets no sources, never the dev
credentials.
"""

from ira.runtime.settings.loader import (
    CONFIG_FILE_ENV,
    DEFAULT_CONFIG_FILE,
    ENV_KEYS,
    load_settings,
    render_config_template,
)
from ira.runtime.settings.model import (
    AccessRole,
    ApiToken,
    CoordinatorSettings,
    Duration,
    Grant,
    HttpSettings,
    KafkaSettings,
    NotifierSettings,
    RuntimeTuning,
    Settings,
    SlackApprover,
    SlackSettings,
    SourceSettings,
)

__all__ = [
    "CONFIG_FILE_ENV",
    "DEFAULT_CONFIG_FILE",
    "ENV_KEYS",
    "AccessRole",
    "ApiToken",
    "CoordinatorSettings",
    "Duration",
    "Grant",
    "HttpSettings",
    "KafkaSettings",
    "NotifierSettings",
    "RuntimeTuning",
    "Settings",
    "SlackApprover",
    "SlackSettings",
    "SourceSettings",
    "load_settings",
    "render_config_template",
]
