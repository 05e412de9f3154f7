"""The docs site's pages that live outside docs/: the README is its start page, examples/README.md the demo's and
benchmarks/README.md the cost's method.
Every page writes its links as the repository lays the files out (so they work where the repository is read);
here each link to one of these pages, or from them into docs/, becomes the site's path, and `mkdocs build
--strict` checks it like any other."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File

# Repository path -> the site's page.
PAGES = {"README.md": "index.md", "examples/README.md": "examples.md", "benchmarks/README.md": "benchmarks.md"}
LINK = re.compile(r"\]\(([^)\s#]+)(#[^)\s]*)?\)")


def on_files(files, config):
    root = Path(config.config_file_path).parent
    for source, page in PAGES.items():
        files.append(File.generated(config, page, abs_src_path=str(root / source)))
    return files


def on_page_markdown(markdown, page, config, files):
    repository_path = {page: source for source, page in PAGES.items()}.get(page.file.src_uri,
                                                                        f"docs/{page.file.src_uri}")
    here = posixpath.dirname(repository_path)
    page_dir = posixpath.dirname(page.file.src_uri)

    def site_link(match: re.Match) -> str:
        target, anchor = match.group(1), match.group(2) or ""
        if "://" in target or target.startswith(("/", "mailto:")):
            return match.group(0)
        in_repository = posixpath.normpath(posixpath.join(here, target))
        if in_repository in PAGES:
            in_site = PAGES[in_repository]
        elif in_repository.startswith("docs/"):
            in_site = in_repository.removeprefix("docs/")
        else:
            return match.group(0)  # outside the site: left as written, so the strict build reports it
        return f"]({posixpath.relpath(in_site, page_dir or '.')}{anchor})"

    return LINK.sub(site_link, markdown)
