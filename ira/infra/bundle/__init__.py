"""The scenario bundle format (DESIGN.md §8): versioned, described by ``schema.json``, checked.

``load_bundle`` / ``check_bundle`` read a bundle directory; ``python -m ira.infra.bundle.schema``
regenerates ``schema.json`` from the models in ``format``.
"""

from ira.infra.bundle.format import CURRENT_VERSION, FORMAT_VERSIONS, BundleDocument
from ira.infra.bundle.load import Bundle, BundleError, Problem, check_bundle, load_bundle
from ira.infra.bundle.write import BundleExistsError, write_bundle

__all__ = ["CURRENT_VERSION", "FORMAT_VERSIONS", "Bundle", "BundleDocument", "BundleError", "BundleExistsError",
           "Problem", "check_bundle", "load_bundle", "write_bundle"]
