"""trainguard trainer SDK: checkpoint when the pod is told to stop, resume after.

``from trainguard import migrator`` gives the process-wide singleton, keeping the
pytorchjob-migration API (register, listening, resume, load_ckpt). Importing
this package never imports torch.
"""

from ._fence import Fenced
from ._migrator import Migrator
from ._reset import reset_generations

migrator = Migrator()

__all__ = ["Fenced", "Migrator", "migrator", "reset_generations"]
__version__ = "0.1.0"
