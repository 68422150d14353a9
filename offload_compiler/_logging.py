"""``TORCH_LOGS=offload`` (INFO) and ``TORCH_LOGS=+offload`` (DEBUG).

The name ``offload`` is registered with ``torch._logging`` for the package's loggers
(``offload_compiler`` and its children), so it also works in
``torch._logging.set_logs(modules={"offload": logging.DEBUG})``.

Torch reads ``TORCH_LOGS`` once, at ``import torch``, and refuses a name it does not
know; the package registers its name only after torch is imported. So when this
package imports torch (``import offload_compiler`` comes first), :func:`import_torch`
hides ``offload`` from that first reading, registers it, and has torch read the
setting again. When torch was imported first, torch has already refused the setting;
``TORCH_LOGS=+offload_compiler`` (the package's module name, which torch resolves by
itself) works in either order.
"""

from __future__ import annotations

import os
import sys

#: The name in ``TORCH_LOGS`` and the logger it controls.
ALIAS = "offload"
LOGGER = "offload_compiler"
ENV = "TORCH_LOGS"


def _names_alias(setting: str) -> bool:
    return any(part.strip().lstrip("+-") == ALIAS for part in setting.split(","))


def _without_alias(setting: str) -> str:
    return ",".join(p for p in setting.split(",") if p.strip().lstrip("+-") != ALIAS)


def import_torch() -> None:
    """Import torch with ``offload`` registered as a ``TORCH_LOGS`` name (see above)."""
    setting = os.environ.get(ENV)
    hide = "torch" not in sys.modules and setting is not None and _names_alias(setting)
    if hide:
        rest = _without_alias(setting)
        if rest.strip():
            os.environ[ENV] = rest
        else:  # torch fails on an empty TORCH_LOGS (it reads "" as {}, not as no setting)
            del os.environ[ENV]
    try:
        from torch._logging import _internal
    finally:
        if hide:
            os.environ[ENV] = setting
    _internal.register_log(ALIAS, LOGGER)
    if hide:
        _internal._init_logs()  # read TORCH_LOGS again, now that "offload" is known
