"""What the hostile-input tests share (test_hostile.py, test_hostile_plot.py):
the check that a call is refused in one line, and inputs built to be hostile."""

from fulcrum import FulcrumError

DEEP = 100000  # past Python's recursion limit, far past every reader's bound


def refused(call, code, words):
    try:
        result = call()
    except FulcrumError as error:
        text = str(error)
        assert error.code == code, text
        assert "\n" not in text and text == text.strip()
        for word in words:
            assert word in text, text
        return text
    raise AssertionError(f"accepted: {result!r}")


def nested(depth):
    value = [1]
    for _ in range(depth):
        value = [value]
    return value



def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path
