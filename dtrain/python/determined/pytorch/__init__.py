"""determined.pytorch is kdet.pytorch (one module, two names)."""
import sys

import kdet.pytorch

sys.modules[__name__] = kdet.pytorch
