"""The static HTML report site: read runs, compute their reports, write or zip a self-contained folder."""

from servebench.output.site.inputs import RunInput, load_run, load_runs
from servebench.output.site.kvview import KvOptions
from servebench.output.site.pages import SiteOptions, build_pages
from servebench.output.site.site import build_site, report_zip_bytes, site_zip_bytes, write_site

__all__ = ["KvOptions", "RunInput", "SiteOptions", "build_pages", "build_site", "load_run", "load_runs", "report_zip_bytes",
           "site_zip_bytes", "write_site"]
