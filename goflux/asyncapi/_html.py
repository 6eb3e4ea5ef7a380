"""An AsyncAPI document as a web page, rendered by AsyncAPI's own React component."""

from __future__ import annotations

import html
import json
from typing import Any

from goflux.service._health import ASGIApp, Scope, Send, http_app, send_response

__all__ = ("RENDERER", "asyncapi_app", "asyncapi_html")

_SCRIPT_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})

RENDERER = "https://unpkg.com/@asyncapi/react-component@3.2.1"
"""Where the page loads the renderer from (its standalone bundle and default styles)."""


def asyncapi_html(document: dict[str, Any], *, renderer: str = RENDERER) -> str:
    """A self-contained HTML page showing ``document`` with AsyncAPI's React component.

    The document is embedded in the page; the browser loads the renderer's script and
    styles from ``renderer`` (the npm package ``@asyncapi/react-component``, by
    default from unpkg; give a URL of your own copy where the web is out of reach).
    """
    title = html.escape(str(document.get("info", {}).get("title", "AsyncAPI")))
    base = html.escape(renderer.rstrip("/"), quote=True)
    # Inside <script>, "</script" ends the element and "<!--" changes how it is read:
    # no "<" (nor ">", "&") stays as it is; JSON strings hold them as \u escapes.
    embedded = json.dumps(document, ensure_ascii=False).translate(_SCRIPT_SAFE)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} (AsyncAPI)</title>
<link rel="stylesheet" href="{base}/styles/default.min.css">
</head>
<body>
<div id="asyncapi"></div>
<script src="{base}/browser/standalone/index.js"></script>
<script>
AsyncApiStandalone.render(
  {{ schema: {embedded}, config: {{ show: {{ sidebar: true }} }} }},
  document.getElementById("asyncapi"),
);
</script>
</body>
</html>
"""


def asyncapi_app(
    document: dict[str, Any], *, yaml_text: str | None = None, renderer: str = RENDERER
) -> ASGIApp:
    """An ASGI app serving ``document``: ``/`` (the page), ``/asyncapi.json``, ``/asyncapi.yaml``.

    ``/asyncapi.yaml`` answers 404 unless ``yaml_text`` is given. Other paths get 404,
    methods other than GET and HEAD 405.
    """
    page = asyncapi_html(document, renderer=renderer).encode()
    files = {
        "/": (page, "text/html; charset=utf-8"),
        "/asyncapi.json": (
            (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode(),
            "application/json",
        ),
    }
    if yaml_text is not None:
        files["/asyncapi.yaml"] = (yaml_text.encode(), "application/yaml")

    async def app(scope: Scope, send: Send) -> None:
        found = files.get(scope["path"])
        if found is None:
            known = ", ".join(files)
            await send_response(send, 404, f"not found; try {known}\n".encode(), "text/plain")
            return
        if scope["method"] not in ("GET", "HEAD"):
            await send_response(send, 405, b"GET or HEAD\n", "text/plain")
            return
        data, content_type = found
        await send_response(send, 200, data, content_type, head=scope["method"] == "HEAD")

    return http_app(app)
