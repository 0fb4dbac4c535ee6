"""API documentation that works offline: Swagger UI and ReDoc from files the service serves itself (the assets that
the pinned fastapi-offline wheel ships), and an OpenAPI schema that declares the errors the service really sends (the
routes declare them from `app.api.errors.error_responses`)."""

from __future__ import annotations

import functools
from importlib.resources import files
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, Response

ASSETS_PATH = "/docs-assets"
ASSETS_DIR = str(files("fastapi_offline") / "static")
_REDOC_LOGO_URL = b"https://cdn.redoc.ly/redoc/logo-mini.svg"

router = APIRouter(include_in_schema=False)


def openapi_without_422(app: FastAPI) -> dict[str, Any]:
    """FastAPI documents a 422 for every route with a body; this service answers bad bodies with an OpenAI 400."""
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title, version=app.version, summary=app.summary, description=app.description, routes=app.routes
        )
        for path in schema.get("paths", {}).values():
            for operation in path.values():
                operation.get("responses", {}).pop("422", None)
        components = schema.get("components", {}).get("schemas", {})
        for name in ("HTTPValidationError", "ValidationError"):
            components.pop(name, None)
        app.openapi_schema = schema
    return app.openapi_schema


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return get_swagger_ui_html(
        openapi_url=f"{root}/openapi.json",
        title="Speech service – Swagger UI",
        swagger_js_url=f"{root}{ASSETS_PATH}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{ASSETS_PATH}/swagger-ui.css",
        swagger_favicon_url=f"{root}{ASSETS_PATH}/favicon.png",
        oauth2_redirect_url=f"{root}/docs/oauth2-redirect",
    )


@router.get("/docs/oauth2-redirect")
async def swagger_ui_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


@functools.cache
def _redoc_bundle() -> bytes:
    """ReDoc's bundle with the one address it hard-codes (its logo, in the sidebar) pointed at a local image."""
    bundle = (files("fastapi_offline") / "static" / "redoc.standalone.js").read_bytes()
    return bundle.replace(_REDOC_LOGO_URL, f"{ASSETS_PATH}/favicon.png".encode())


@router.get(f"{ASSETS_PATH}/redoc.standalone.js")
async def redoc_bundle() -> Response:
    return Response(_redoc_bundle(), media_type="text/javascript", headers={"Cache-Control": "public, max-age=3600"})


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return get_redoc_html(
        openapi_url=f"{root}/openapi.json",
        title="Speech service – ReDoc",
        redoc_js_url=f"{root}{ASSETS_PATH}/redoc.standalone.js",
        redoc_favicon_url=f"{root}{ASSETS_PATH}/favicon.png",
        with_google_fonts=False,
    )
