"""A local stand-in for the Hugging Face Hub API on 127.0.0.1: just what publishing and downloading back need.

Routes (as huggingface_hub 2.x calls them):
    POST /api/repos/create                              create_repo (409 if it exists; exist_ok handles that)
    POST /api/validate-yaml                             create_commit checks README.md metadata first
    POST /api/models/{repo}/branch/{branch}             create_branch
    POST /api/models/{repo}/preupload/{rev}             upload modes: "regular" for every file, so all content
                                                        travels inline (base64) in the commit; no LFS/Xet
    POST /api/models/{repo}/commit/{rev}                the NDJSON commit: applied all at once or not at all
    GET  /api/models/{repo}[/revision/{rev}]            repo_info (snapshot_download)
    GET  /api/models/{repo}/tree/{rev}[/{path}]         list_repo_tree (snapshot_download)
    HEAD/GET /{repo}/resolve/{rev}/{path}               file downloads (hf_hub_download, ModelCard.load)

Write routes need `Authorization: Bearer <token>`. Every repo creation, branch and commit is appended to the log
file as one JSON line (files with size and sha256); headers are never logged, so the token cannot leak there.
`fail["commit"] = 500` makes commits answer HTTP 500 without applying anything (`fail["create"]` likewise).

    python tests/hub_standin.py --port 8765 --token hf_xxx --log hub_log.jsonl   # then HF_ENDPOINT=http://127.0.0.1:8765
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

GITATTRIBUTES = (
    b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n"
)


def blob_oid(data: bytes) -> str:
    """git's blob id, which the Hub uses as a regular file's oid and ETag."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Repo:
    private: bool
    commits: dict = field(default_factory=dict)  # oid -> {"parent", "summary", "files": {path: bytes}}
    branches: dict = field(default_factory=dict)  # name -> oid

    def commit_of(self, rev: str) -> str | None:
        return self.branches.get(rev) or (rev if rev in self.commits else None)


class HubStandin:
    def __init__(
        self, token: str | None = None, log: Path | None = None, host: str = "127.0.0.1", port: int = 0
    ):
        self.token, self.log_path = token, Path(log) if log else None
        self.repos: dict[str, Repo] = {}
        self.requests: list[tuple[str, str, int]] = []  # (method, path, status), for tests
        self.fail: dict[str, int] = {}
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer((host, port), _handler(self))
        self.url = f"http://{host}:{self.server.server_address[1]}"
        self._thread = None

    def __enter__(self) -> HubStandin:
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def log(self, event: dict) -> None:
        if self.log_path:
            with self.log_path.open("a") as f:
                f.write(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S"), **event}) + "\n")

    def files(self, repo_id: str, rev: str = "main") -> dict[str, bytes]:
        repo = self.repos[repo_id]
        return repo.commits[repo.commit_of(rev)]["files"]

    def new_commit(self, repo: Repo, parent: str | None, summary: str, files: dict) -> str:
        oid = hashlib.sha1(
            json.dumps(
                [parent, summary, sorted((p, blob_oid(b)) for p, b in files.items()), len(repo.commits)]
            ).encode()
        ).hexdigest()
        repo.commits[oid] = {"parent": parent, "summary": summary, "files": files}
        return oid


def _handler(hub: HubStandin):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet; the commit log is the record
            pass

        # --- plumbing

        def _send(self, status: int, body=b"", headers: dict | None = None, head: bool = False):
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header(
                "Content-Type", "application/octet-stream" if isinstance(body, bytes) else "application/json"
            )
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if not head:
                self.wfile.write(data)
            hub.requests.append((self.command, urlsplit(self.path).path, status))

        def _error(self, status: int, message: str, code: str | None = None, head: bool = False):
            headers = {"X-Error-Message": message, **({"X-Error-Code": code} if code else {})}
            self._send(status, {"error": message}, headers, head)

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _authorized(self) -> bool:
            return hub.token is None or self.headers.get("Authorization") == f"Bearer {hub.token}"

        def _parts(self):
            u = urlsplit(self.path)
            return [unquote(p) for p in u.path.strip("/").split("/")], parse_qs(u.query)

        # --- routes

        def do_POST(self):
            parts, _ = self._parts()
            body = self._body()
            if not self._authorized():
                return self._error(401, "Invalid credentials in Authorization header")
            if parts[:3] == ["api", "repos", "create"]:
                return self._create(json.loads(body))
            if parts[:2] == ["api", "validate-yaml"]:
                return self._send(200, {"errors": [], "warnings": []})
            if len(parts) >= 6 and parts[:2] == ["api", "models"]:
                repo_id, action, rev = f"{parts[2]}/{parts[3]}", parts[4], "/".join(parts[5:])
                with hub.lock:
                    repo = hub.repos.get(repo_id)
                    if repo is None:
                        return self._error(404, f"Repository Not Found for url: {self.path}", "RepoNotFound")
                    if action == "branch":
                        return self._branch(repo_id, repo, rev, json.loads(body or b"{}"))
                    if repo.commit_of(rev) is None:
                        return self._error(404, f"Invalid rev id: {rev}", "RevisionNotFound")
                    if action == "preupload":
                        return self._preupload(repo, rev, json.loads(body))
                    if action == "commit":
                        return self._commit(repo_id, repo, rev, body)
            return self._error(404, f"no such route in the Hub stand-in: POST {self.path}")

        def do_GET(self, head: bool = False):
            parts, query = self._parts()
            if parts[:2] == ["api", "whoami-v2"]:
                return (
                    self._send(200, {"type": "user", "name": "standin-user"})
                    if self._authorized()
                    else self._error(401, "Invalid credentials in Authorization header")
                )
            if parts[:2] == ["api", "models"] and len(parts) >= 4:
                repo_id, rest = f"{parts[2]}/{parts[3]}", parts[4:]
                if not rest or rest[0] == "revision":
                    return self._info(repo_id, "/".join(rest[1:]) or "main")
                if rest[0] == "tree":
                    return self._tree(repo_id, rest[1], "/".join(rest[2:]), query)
            if len(parts) >= 5 and parts[2] == "resolve":
                return self._resolve(f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]), head)
            return self._error(404, f"no such route in the Hub stand-in: GET {self.path}", head=head)

        def do_HEAD(self):
            return self.do_GET(head=True)

        # --- handlers

        def _create(self, payload: dict):
            if "create" in hub.fail:
                return self._error(hub.fail["create"], "stand-in: repo creation failure injected")
            repo_id = f"{payload.get('organization')}/{payload['name']}"
            url = f"{hub.url}/{repo_id}"
            with hub.lock:
                if (
                    repo_id in hub.repos
                ):  # the Hub's 409 carries the url too; create_repo(exist_ok=True) reads it
                    return self._send(
                        409,
                        {"error": "You already created this model repo", "url": url},
                        {"X-Error-Message": "You already created this model repo"},
                    )
                repo = Repo(private=payload.get("visibility") == "private" or bool(payload.get("private")))
                repo.branches["main"] = hub.new_commit(
                    repo, None, "initial commit", {".gitattributes": GITATTRIBUTES}
                )
                hub.repos[repo_id] = repo
            hub.log({"event": "create_repo", "repo": repo_id, "private": repo.private})
            return self._send(200, {"url": url, "name": repo_id, "id": repo_id})

        def _branch(self, repo_id: str, repo: Repo, branch: str, payload: dict):
            if branch in repo.branches:
                return self._error(409, f"Reference already exists: refs/heads/{branch}")
            start = repo.commit_of(payload.get("startingPoint") or "main")
            if start is None:
                return self._error(404, "Invalid starting point", "RevisionNotFound")
            repo.branches[branch] = start
            hub.log({"event": "create_branch", "repo": repo_id, "branch": branch, "from": start})
            return self._send(200, {})

        def _preupload(self, repo: Repo, rev: str, payload: dict):
            files = repo.commits[repo.commit_of(rev)]["files"]
            out = [
                {
                    "path": f["path"],
                    "uploadMode": "regular",
                    "shouldIgnore": False,
                    "oid": blob_oid(files[f["path"]]) if f["path"] in files else None,
                }
                for f in payload["files"]
            ]
            return self._send(200, {"files": out, "commitOid": repo.commit_of(rev)})

        def _commit(self, repo_id: str, repo: Repo, rev: str, body: bytes):
            if "commit" in hub.fail:
                hub.log(
                    {"event": "commit_failed", "repo": repo_id, "branch": rev, "status": hub.fail["commit"]}
                )
                return self._error(hub.fail["commit"], "stand-in: commit failure injected")
            parent = repo.commit_of(rev)
            files = dict(repo.commits[parent]["files"])
            header, changed = {}, []
            for line in body.splitlines():
                item = json.loads(line)
                key, value = item["key"], item["value"]
                if key == "header":
                    header = value
                elif key == "file":
                    data = base64.b64decode(value["content"])
                    files[value["path"]] = data
                    changed.append(
                        {"path": value["path"], "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                    )
                elif key == "deletedFile":
                    files.pop(value["path"], None)
                    changed.append({"path": value["path"], "deleted": True})
                else:  # lfsFile, deletedFolder, copies: never sent, since preupload answers "regular"
                    return self._error(400, f"the Hub stand-in does not implement commit operation {key!r}")
            oid = hub.new_commit(repo, parent, header.get("summary", ""), files)
            if rev in repo.branches:
                repo.branches[rev] = oid
            hub.log(
                {
                    "event": "commit",
                    "repo": repo_id,
                    "branch": rev,
                    "commit": oid,
                    "parent": parent,
                    "summary": header.get("summary"),
                    "files": changed,
                }
            )
            return self._send(
                200,
                {"commitUrl": f"{hub.url}/{repo_id}/commit/{oid}", "commitOid": oid, "pullRequestUrl": None},
            )

        def _lookup(self, repo_id: str, rev: str, head: bool = False):
            repo = hub.repos.get(repo_id)
            if repo is None or (repo.private and not self._authorized()):
                return self._error(404, "Repository Not Found", "RepoNotFound", head), None
            oid = repo.commit_of(rev)
            if oid is None:
                return self._error(404, f"Invalid rev id: {rev}", "RevisionNotFound", head), None
            return repo, oid

        def _info(self, repo_id: str, rev: str):
            repo, oid = self._lookup(repo_id, rev)
            if oid is None:
                return
            files = repo.commits[oid]["files"]
            return self._send(
                200,
                {
                    "id": repo_id,
                    "modelId": repo_id,
                    "sha": oid,
                    "private": repo.private,
                    "siblings": [{"rfilename": p} for p in sorted(files)],
                    "tags": [],
                },
            )

        def _tree(self, repo_id: str, rev: str, prefix: str, query: dict):
            repo, oid = self._lookup(repo_id, rev)
            if oid is None:
                return
            recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
            prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
            entries, dirs = [], set()
            for path, data in sorted(repo.commits[oid]["files"].items()):
                if not path.startswith(prefix):
                    continue
                rest = path[len(prefix) :].split("/")
                for i in range(1, len(rest) if recursive else min(2, len(rest))):
                    dirs.add(prefix + "/".join(rest[:i]))
                if recursive or len(rest) == 1:
                    entries.append({"type": "file", "oid": blob_oid(data), "size": len(data), "path": path})
            entries += [{"type": "directory", "oid": "0" * 40, "size": 0, "path": d} for d in sorted(dirs)]
            return self._send(200, entries)

        def _resolve(self, repo_id: str, rev: str, path: str, head: bool):
            repo, oid = self._lookup(repo_id, rev, head)
            if oid is None:
                return
            data = repo.commits[oid]["files"].get(path)
            if data is None:
                return self._error(404, f"Entry not found: {path}", "EntryNotFound", head)
            return self._send(200, data, {"X-Repo-Commit": oid, "ETag": f'"{blob_oid(data)}"'}, head)

    return Handler


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--token", help="the only token accepted for writes (default: any request may write)")
    p.add_argument("--log", type=Path, help="append one JSON line per repo creation, branch and commit here")
    args = p.parse_args()
    hub = HubStandin(token=args.token, log=args.log, host=args.host, port=args.port)
    print(f"Hub stand-in at {hub.url}", flush=True)
    try:
        hub.server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
