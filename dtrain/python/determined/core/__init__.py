"""determined.core is kdet.core (one module, two names)."""
import sys

import kdet.core

sys.modules[__name__] = kdet.core
