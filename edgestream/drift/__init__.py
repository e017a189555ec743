"""edgestream.drift — drift detectors over the prequential errors (pure Python and numpy: no torch, no config).

A detector reads each sample's prequential error in the order the model scored it (classification: 1 - correct;
regression: the absolute error) and says when their distribution changed. The built-ins (adwin, page_hinkley,
ddm) and a user's (``"pkg.mod:factory"``) are one pluggable kind, `edgestream.plugins.DETECTORS`, built by
`make_detector`; docs/stream-learning.md ("Drift detectors") defines each, docs/extending.md the interface.
"""

from edgestream.lazy import lazy_exports

#: public name -> the module that defines it (loaded on first use)
_EXPORTS = {
    "ADWIN": "edgestream.drift.adwin",
    "Detector": "edgestream.drift.base",
    "DetectorError": "edgestream.drift.base",
    "DDM": "edgestream.drift.ddm",
    "make_detector": "edgestream.drift.detectors",
    "PageHinkley": "edgestream.drift.page_hinkley",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
