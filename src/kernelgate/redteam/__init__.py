"""Red team and positive controls: defective kernels that must be rejected, honest ones that
must pass, as data (``catalog``), and the runner behind ``kernelgate calibrate`` (``runner``).

The kernel files ship inside the package (``references/``, ``defects/``, ``controls/``) and
are addressed by path, so the catalog works from a source tree and from an installed wheel.
"""

from kernelgate.redteam.catalog import CONTROLS, DEFECTS, Entry, entries

__all__ = ["CONTROLS", "DEFECTS", "Entry", "entries"]
