"""Who may use the API and open the pages: with REGROW_SERVER_API_TOKEN set, the API takes a bearer header; the
pages also take a cookie that proves the token.

A browser cannot send a header with a page load or an EventSource, so `?token=` once sets an HttpOnly cookie
(an HMAC of the token, never the token itself) and redirects to the same page without it in the address.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import RedirectResponse
from pydantic import SecretStr

COOKIE = "regrow_dashboard"
# No inline script or style: text an agent wrote can never run in the operator's browser.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class PageAccess:
    """Checks one request against the server's token (every request passes when none is set)."""

    def __init__(self, token: SecretStr | None):
        self._token = token.get_secret_value().encode() if token else None

    def cookie_value(self) -> str:
        assert self._token is not None
        return hmac.new(self._token, b"regrow dashboard session", hashlib.sha256).hexdigest()

    def token_matches(self, given: str) -> bool:
        return self._token is not None and secrets.compare_digest(given.strip().encode(), self._token)

    def bearer_allowed(self, request: Request) -> bool:
        """No token is set, or the request sends `Authorization: Bearer <token>` (what the JSON API takes)."""
        if self._token is None:
            return True
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and self.token_matches(given)

    def allowed(self, request: Request) -> bool:
        """What the pages take: the bearer header, or the cookie that signing in set."""
        if self.bearer_allowed(request):
            return True
        cookie = request.cookies.get(COOKIE, "")
        return secrets.compare_digest(cookie.encode(), self.cookie_value().encode())

    def sign_in(self, request: Request) -> RedirectResponse:
        """The redirect to the page without `?token=`, setting the cookie; call only when the token matched."""
        kept = [(key, value) for key, value in request.query_params.multi_items() if key != "token"]
        query = urlencode(kept)
        response = RedirectResponse(request.url.path + (f"?{query}" if query else ""), status_code=303)
        response.set_cookie(
            COOKIE,
            self.cookie_value(),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
        return response
