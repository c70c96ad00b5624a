"""A stand-in for an agent's terminal UI, for the tmux delivery tests (run as a program named
`claude`, so that tmux shows it as one). Like Claude Code and Codex it reads the keyboard raw,
turns on bracketed paste, shows a paste collapsed as "[Pasted text]", and takes an Enter that
arrives within 100 ms of a paste as part of the paste (a newline), not as "send". Each message
it sends is appended to the file named by its first argument, followed by a line "<<SENT>>".
"""
import os
import sys
import time
import tty

out = sys.argv[1]
tty.setraw(0)
os.write(1, b"\x1b[?2004h> ")
buf = b""
text = ""
in_paste = False
paste_end = 0.0
while True:
    data = os.read(0, 65536)
    if not data:
        break
    buf += data
    while buf:
        if in_paste:
            end = buf.find(b"\x1b[201~")
            if end < 0:
                text += buf.decode(errors="replace")
                buf = b""
                break
            text += buf[:end].decode(errors="replace")
            buf = buf[end + 6:]
            in_paste = False
            paste_end = time.monotonic()
            os.write(1, b"[Pasted text]")
        elif buf.startswith(b"\x1b[200~"):
            buf = buf[6:]
            in_paste = True
        elif buf[:1] in (b"\r", b"\n"):
            buf = buf[1:]
            if time.monotonic() - paste_end < 0.1:
                text += "\n"
                continue
            if text:
                with open(out, "a") as f:
                    f.write(text + "\n<<SENT>>\n")
                os.write(1, b"\r\n\xe2\x9c\x93 sent\r\n\xe2\x8f\xba thinking\r\n> ")
            text = ""
        else:
            text += buf[:1].decode(errors="replace")
            buf = buf[1:]
