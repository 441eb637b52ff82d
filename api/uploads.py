"""Turning an upload into named texts: reading the body within a size limit, splitting multipart form data,
and decoding UTF-8 with errors that name the file and the byte."""

from __future__ import annotations

from dataclasses import dataclass
from email.message import Message
from email.parser import HeaderParser
from email.policy import HTTP
from pathlib import PurePosixPath

from models.errors import InvalidInput
from models.settings import get_settings

UTF8_BOM = b"\xef\xbb\xbf"
FILE_FIELDS = ("files", "file")
MAX_FILES_PER_UPLOAD = 500
# UTF-8 takes at most 4 bytes a character; a JSON encoder that escapes non-ASCII text (Python's json and requests
# do by default) takes 6 for each \uXXXX. The framing is JSON's keys, multipart boundaries and part headers.
MAX_BYTES_PER_CHAR = 6
FRAMING_BYTES = 64 * 1024


@dataclass(frozen=True)
class UploadedFile:
    name: str
    data: bytes


@dataclass(frozen=True)
class NamedText:
    name: str
    content: str


def body_limit() -> int:
    """The largest request body taken: one document of the largest size, however its text is encoded, with its
    framing. Files that together need more go in several requests."""
    return MAX_BYTES_PER_CHAR * get_settings().max_document_chars + FRAMING_BYTES


def decode_text(name: str, data: bytes) -> str:
    """The text of an uploaded file: UTF-8, a leading byte-order mark dropped."""
    skipped = len(UTF8_BOM) if data.startswith(UTF8_BOM) else 0
    try:
        return data[skipped:].decode("utf-8")
    except UnicodeDecodeError as error:
        offset = skipped + error.start
        raise InvalidInput(
            f"{name!r} is not valid UTF-8: byte 0x{data[offset]:02x} at offset {offset:,} "
            f"({error.reason}); save it as UTF-8 text and upload it again"
        ) from None


def texts_of(files: list[UploadedFile]) -> list[NamedText]:
    if not files:
        raise InvalidInput("no files in the upload: send them as multipart parts named 'files'")
    if len(files) > MAX_FILES_PER_UPLOAD:
        raise InvalidInput(f"at most {MAX_FILES_PER_UPLOAD} files per upload; send the rest in another request")
    names = [f.name for f in files]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InvalidInput(f"two files in the upload are named {repeated[0]!r}; a job tells documents apart by name")
    return [NamedText(f.name, decode_text(f.name, f.data)) for f in files]


def parse_multipart(body: bytes, content_type: str) -> list[UploadedFile]:
    """The files of a ``multipart/form-data`` body, their bytes exactly as sent."""
    boundary = _param(_headers(f"Content-Type: {content_type}"), "content-type", "boundary")
    if not boundary:
        raise InvalidInput("the multipart content type has no boundary")
    delimiter = b"\r\n--" + boundary.encode("latin-1")
    # The first delimiter may open the body without a line break before it.
    chunks = (b"\r\n" + body).split(delimiter)
    files: list[UploadedFile] = []
    for chunk in chunks[1:]:
        if chunk.startswith(b"--"):
            return files
        head, separator, data = chunk.partition(b"\r\n\r\n")
        if not separator:
            raise InvalidInput("a multipart part has no blank line after its headers")
        files.append(_file_part(head.decode("utf-8", errors="replace"), data))
    raise InvalidInput("the multipart body is incomplete: its closing boundary is missing")


def _file_part(head: str, data: bytes) -> UploadedFile:
    headers = _headers(head.lstrip(" \t\r\n"))
    field = _param(headers, "content-disposition", "name")
    if field not in FILE_FIELDS:
        raise InvalidInput(f"unexpected form field {field!r}: send the files as parts named 'files'")
    filename = headers.get_filename()
    if not filename:
        raise InvalidInput("a file part has no filename; the filename becomes the document's name")
    # Browsers escape quotes in filenames as %22; clients send paths on some systems: keep the last part.
    return UploadedFile(PurePosixPath(filename.replace("%22", '"').replace("\\", "/")).name, data)


def _headers(text: str) -> Message:
    return HeaderParser(policy=HTTP).parsestr(text + "\r\n")


def _param(headers: Message, header: str, param: str) -> str | None:
    value = headers.get_param(param, header=header)
    return value if isinstance(value, str) else None
