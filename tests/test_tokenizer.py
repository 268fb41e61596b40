"""The prompt tokenizer against transformers' tokenizer built from the released files."""

import pytest

from h3cy.errors import H3ValueError
from h3cy.models.tokenizer import Tokenizer

from h3cy.models.tokenizer import DEFAULT_FOLDER as FOLDER  # the released files, shipped with h3cy

PROMPTS = [
    "A red fox walking through snow",
    "a cinematic shot of a lighthouse at dusk, waves crashing, seagulls calling",
    "  leading and trailing spaces  ", " ", "\n", "\t\ttabs\tand\nnewlines\r\n",
    "一只红色的狐狸在雪地里行走", "夜晚的城市街道，霓虹灯闪烁，下着小雨。",
    "桜の木の下で猫が昼寝をしている", "東京タワーと富士山、ドローン撮影",
    "قطة تجلس على النافذة وتراقب المطر", "مرحبا بالعالم",
    "Привет, мир! Кошка играет с мячом.", "Ελληνικά γράμματα", "हिन्दी में एक वाक्य",
    "한국어 문장입니다. 고양이가 잔다.", "Emoji 🦊❄️🎬🔥👩‍👩‍👧‍👦 and flags 🇯🇵🇫🇷",
    "<d>a dog barks</d> then silence", "<|im_start|>user\nhello<|im_end|>", "<|endoftext|>",
    "text with <|vision_start|><|image_pad|><|vision_end|> tokens",
    "<tool_call>{\"name\": \"x\"}</tool_call>", "<think>hmm</think>", "<|cutoff|><|lyrics_start|>la la<|lyrics_end|>",
    "<|caption_start|>caption<|caption_end|>", "not a token: <|im_star|> <d >",
    "numbers 1234567890 3.14159 -42 1e-5", "CamelCaseWordsAndSHOUTING", "it's we're they've I'm you'll he'd",
    "URL https://example.com/path?q=1&b=2#frag", "email me@example.org", "code: def f(x): return x**2",
    "punctuation!!! ??? ... --- ;;; ''' \"\"\"", "mixed English和中文 together", "café naïve résumé façade",
    "e\u0301 decomposed accent (NFC)", "\u00e9 composed accent", "zero\u200bwidth space", "ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ",
    "a" * 300, "the quick brown fox " * 40,
    "Ein Fuchs läuft durch den Schnee, während die Sonne untergeht.", "Un renard marche dans la neige",
    "Una volpe rossa cammina nella neve", "Um raposa vermelha", "Kırmızı bir tilki karda yürüyor",
    "Một con cáo đỏ đi trên tuyết", "สุนัขจิ้งจอกสีแดงเดินบนหิมะ", "שועל אדום הולך בשלג",
    "mathematics ∑∫√∞≈≠ ± × ÷", "musical notes ♪♫ ♩ 𝄞", "   \n\n  \t  ", "trailing newline\n",
]


@pytest.fixture(scope="module")
def both():
    from transformers import AutoTokenizer
    return Tokenizer.from_pretrained(FOLDER), AutoTokenizer.from_pretrained(FOLDER)


def test_ids_equal_transformers(both):
    ours, ref = both
    assert len(PROMPTS) >= 50
    for p in PROMPTS:
        want = ref(p, add_special_tokens=False)["input_ids"]
        assert ours.encode(p) == want, p
        assert ours.decode(want) == ref.decode(want), p


def test_special_token_ids_and_empty_prompt(both):
    ours, ref = both
    for t in ("<d>", "</d>", "<|im_start|>", "<|endoftext|>", "<think>"):
        assert ours.encode(t) == [ref.convert_tokens_to_ids(t)]
    with pytest.raises(H3ValueError, match="empty"):
        ours.encode("")
    with pytest.raises(H3ValueError):
        ours.encode(b"bytes")
