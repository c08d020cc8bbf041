"""A real SMTP client (Python's smtplib and email packages) for tests/email_check_ins.rs.

    python3 smtp_client.py <action> '<json arguments>'

prints one JSON object: what the server answered. Actions:
  send        a message of a given shape (plain, multipart, rfc2047, latin1, shift_jis,
              undeclared_8bit, html_only, big) to `to`
  features    the EHLO extensions the server advertises
  starttls    a plain message sent after STARTTLS, trusting `cafile`
  injection   STARTTLS with a command pipelined behind it in plaintext: must be discarded
"""

import json
import smtplib
import socket
import ssl
import sys
from email.message import EmailMessage
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from email.header import Header


def build(shape, args):
    subject = args.get("subject", "Backup done")
    body = args.get("body", "all good\n")
    if shape == "plain":
        msg = EmailMessage()
        msg["Subject"] = subject
        msg.set_content(body)
    elif shape == "rfc2047":
        # EmailMessage encodes a non-ASCII subject as RFC 2047 words.
        msg = EmailMessage()
        msg["Subject"] = subject
        msg.set_content(body, cte="quoted-printable")
    elif shape == "multipart":
        msg = MIMEMultipart("alternative")
        msg["Subject"] = Header(subject, "utf-8")
        msg.attach(MIMEText(body, "plain", "utf-8"))
        msg.attach(MIMEText("<p>" + body + "</p>", "html", "utf-8"))
        attachment = MIMEText("log line 1\nlog line 2\n", "plain", "utf-8")
        attachment.add_header("Content-Disposition", "attachment", filename="run.log")
        outer = MIMEMultipart("mixed")
        outer["Subject"] = msg["Subject"]
        del msg["Subject"]
        outer.attach(msg)
        outer.attach(attachment)
        msg = outer
    elif shape == "latin1":
        msg = MIMEText(body, "plain", "iso-8859-1")
        msg.replace_header("Content-Transfer-Encoding", "8bit")
        msg.set_payload(body.encode("iso-8859-1"))
        msg["Subject"] = Header(subject, "iso-8859-1")
    elif shape == "shift_jis":
        msg = MIMEText(body, "plain", "shift_jis")
        msg["Subject"] = Header(subject, "shift_jis")
    elif shape == "html_only":
        msg = MIMEText(body, "html", "utf-8")
        msg["Subject"] = subject
    elif shape in ("undeclared_8bit", "big"):
        raw = (
            "Subject: " + subject + "\r\n"
            "From: nas@example.net\r\n\r\n"
        ).encode("utf-8")
        payload = bytes.fromhex(args["body_hex"]) if "body_hex" in args else body.encode("utf-8")
        return raw + payload
    else:
        raise SystemExit("unknown shape " + shape)
    msg["From"] = args.get("from", "nas@example.net")
    msg["To"] = ", ".join(args["to"])
    # As mail servers send it: CRLF line ends.
    return msg.as_bytes(policy=msg.policy.clone(linesep="\r\n"))


def send(args):
    data = build(args.get("shape", "plain"), args)
    if args.get("shape") == "big":
        data = data + b"x" * args["size"]
    try:
        with smtplib.SMTP(args["host"], args["port"], timeout=30) as smtp:
            smtp.ehlo("client.example.net")
            refused = smtp.sendmail(args.get("from", "nas@example.net"), args["to"], data)
            return {"ok": True, "refused": {k: v[0] for k, v in refused.items()}}
    except smtplib.SMTPRecipientsRefused as e:
        return {"ok": False, "stage": "rcpt", "codes": sorted({v[0] for v in e.recipients.values()})}
    except smtplib.SMTPSenderRefused as e:
        return {"ok": False, "stage": "mail", "codes": [e.smtp_code]}
    except smtplib.SMTPDataError as e:
        return {"ok": False, "stage": "data", "codes": [e.smtp_code]}
    except smtplib.SMTPServerDisconnected as e:
        return {"ok": False, "stage": "disconnected", "codes": []}


def features(args):
    with smtplib.SMTP(args["host"], args["port"], timeout=30) as smtp:
        smtp.ehlo("client.example.net")
        return {"features": smtp.esmtp_features}


def starttls(args):
    context = ssl.create_default_context(cafile=args["cafile"])
    context.check_hostname = False
    with smtplib.SMTP(args["host"], args["port"], timeout=30) as smtp:
        smtp.ehlo("client.example.net")
        offered = smtp.has_extn("starttls")
        smtp.starttls(context=context)
        smtp.ehlo("client.example.net")
        offered_again = smtp.has_extn("starttls")
        msg = EmailMessage()
        msg["Subject"] = args.get("subject", "over TLS")
        msg.set_content("secret-free body\n")
        smtp.sendmail("nas@example.net", args["to"], msg.as_bytes())
        return {"ok": True, "offered": offered, "offered_after_tls": offered_again,
                "cipher": smtp.sock.cipher()[0]}


def injection(args):
    sock = socket.create_connection((args["host"], args["port"]), timeout=10)
    file = sock.makefile("rb")
    file.readline()  # 220 greeting
    sock.sendall(b"EHLO client.example.net\r\n")
    while True:
        line = file.readline()
        if line[3:4] == b" ":
            break
    # The injected NOOP rides in the same packet as STARTTLS, in plaintext.
    sock.sendall(b"STARTTLS\r\nNOOP\r\n")
    ready = file.readline()
    context = ssl.create_default_context(cafile=args["cafile"])
    context.check_hostname = False
    tls = context.wrap_socket(sock, server_hostname="localhost")
    tls.settimeout(1.0)
    try:
        leaked = tls.recv(1024)
    except (socket.timeout, TimeoutError):
        leaked = b""
    tls.settimeout(10)
    tls.sendall(b"EHLO client.example.net\r\n")
    after = tls.recv(4096)
    tls.sendall(b"QUIT\r\n")
    return {"ready": ready.decode().strip(), "leaked": leaked.decode(errors="replace"),
            "ehlo_after": after.decode(errors="replace")}


if __name__ == "__main__":
    action, raw = sys.argv[1], sys.argv[2]
    result = {"send": send, "features": features, "starttls": starttls,
              "injection": injection}[action](json.loads(raw))
    print(json.dumps(result))
