"""Long multilingual chapters for the demo, the tests and the benchmarks.

Taken from ``../shared/corpus`` when it is there (real texts, cut into chapters at paragraph breaks); otherwise
written by a small generator of our own: sentences drawn from a vocabulary per language with a seeded random
generator, so the same arguments always give the same chapters.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

CORPUS_FILES = {
    "ru": "ru_war_and_peace_vol1.txt",
    "zh": "zh_hongloumeng.txt",
    "ja": "ja_wagahai_neko.txt",
    "en": "en_botchan.txt",
}
LANGUAGES = tuple(CORPUS_FILES)

_VOCABULARY = {
    "en": (
        "the river mill village road evening morning letter father mother brother sister teacher school "
        "garden window winter summer station train soldier captain doctor friend stranger house door table "
        "walked looked said thought waited wrote answered remembered carried opened closed laughed quietly "
        "slowly suddenly again never always almost often old young small large long short bright dark "
        "cold warm early late and but when while because although after before with without into over"
    ).split(),
    "ru": (
        "река мельница деревня дорога вечер утро письмо отец мать брат сестра учитель школа сад окно зима "
        "лето станция поезд солдат капитан доктор друг незнакомец дом дверь стол шёл смотрел сказал думал "
        "ждал писал ответил вспомнил нёс открыл закрыл смеялся тихо медленно вдруг снова никогда всегда "
        "почти часто старый молодой маленький большой длинный короткий светлый тёмный холодный тёплый "
        "рано поздно и но когда пока потому что хотя после перед с без в над"
    ).split(),
    "zh": (
        "河 磨坊 村子 道路 傍晚 早晨 书信 父亲 母亲 哥哥 妹妹 先生 学堂 园子 窗户 冬天 夏天 驿站 车马 兵士 "
        "将军 大夫 朋友 客人 房屋 门 桌子 走 看 说 想 等 写 答 记得 拿 开 关 笑 慢慢 忽然 又 从来 总是 "
        "几乎 常常 老 少 小 大 长 短 明 暗 冷 暖 早 晚 和 但是 当 因为 虽然 以后 以前 同 没有 进 过"
    ).split(),
    "ja": (
        "川 水車 村 道 夕方 朝 手紙 父 母 兄 妹 先生 学校 庭 窓 冬 夏 駅 汽車 兵隊 大尉 医者 友達 見知らぬ人 "
        "家 戸 机 歩いた 見た 言った 考えた 待った 書いた 答えた 思い出した 運んだ 開けた 閉めた 笑った "
        "静かに ゆっくり 急に また 決して いつも ほとんど よく 古い 若い 小さい 大きい 長い 短い 明るい "
        "暗い 寒い 暖かい 早く 遅く そして しかし とき ながら から けれども あとで まえに と なしに へ"
    ).split(),
}
_SENTENCE_END = {"en": ". ", "ru": ". ", "zh": "。", "ja": "。"}
_JOINER = {"en": " ", "ru": " ", "zh": "", "ja": ""}
_COMMA = {"en": ", ", "ru": ", ", "zh": "，", "ja": "、"}
_TITLE = {"en": "Chapter {n}", "ru": "Глава {n}", "zh": "第{n}回", "ja": "第{n}章"}


@dataclass(frozen=True)
class Chapter:
    name: str
    language: str
    text: str


def shared_corpus() -> Path | None:
    """The shared corpus folder: ``PLIMSOLL_CORPUS_DIR``, else ``../shared/corpus`` beside the repository."""
    configured = os.environ.get("PLIMSOLL_CORPUS_DIR")
    folder = Path(configured) if configured else Path(__file__).resolve().parents[2] / "shared" / "corpus"
    return folder if folder.is_dir() else None


def generated_text(language: str, chars: int, seed: int) -> str:
    """About ``chars`` characters of sentences in ``language``, the same for the same seed."""
    rng = random.Random(f"{language}:{seed}")
    words, joiner = _VOCABULARY[language], _JOINER[language]
    sentences: list[str] = []
    size = 0
    while size < chars:
        clauses = [joiner.join(rng.choice(words) for _ in range(rng.randint(3, 9))) for _ in range(rng.randint(1, 3))]
        sentence = _COMMA[language].join(clauses)
        sentence = sentence[:1].upper() + sentence[1:] + _SENTENCE_END[language]
        if rng.random() < 0.12:
            sentence += "\n\n"
        sentences.append(sentence)
        size += len(sentence)
    return "".join(sentences).strip()


def corpus_text(language: str) -> str | None:
    folder = shared_corpus()
    if folder is None or not (folder / CORPUS_FILES[language]).is_file():
        return None
    text = (folder / CORPUS_FILES[language]).read_text(encoding="utf-8")
    return text.lstrip("\ufeff").replace("\r\n", "\n")


def cut(text: str, count: int, chars: int) -> list[str]:
    """``count`` pieces of about ``chars`` characters from ``text``, each ending at a paragraph break when one is
    near; wraps around when the text is short."""
    pieces, start = [], 0
    for _ in range(count):
        if start >= len(text) - chars // 2:
            start = 0
        end = min(len(text), start + chars)
        paragraph = text.rfind("\n", start + chars // 2, end)
        end = paragraph if paragraph > start and end < len(text) else end
        pieces.append(text[start:end].strip())
        start = end
    return pieces


def chapters(
    count: int, *, chars: int, languages: tuple[str, ...] = LANGUAGES, prefer_corpus: bool = True
) -> list[Chapter]:
    """``count`` chapters of about ``chars`` characters, the languages taken in turn."""
    per_language = {lang: -(-count // len(languages)) for lang in languages}
    texts: dict[str, list[str]] = {}
    for language, wanted in per_language.items():
        source = corpus_text(language) if prefer_corpus else None
        if source is None:
            texts[language] = [generated_text(language, chars, seed) for seed in range(wanted)]
        else:
            texts[language] = cut(source, wanted, chars)
    result = []
    for index in range(count):
        language = languages[index % len(languages)]
        number = index // len(languages) + 1
        body = texts[language][index // len(languages)]
        title = _TITLE[language].format(n=number)
        result.append(Chapter(f"{index + 1:02d}-{language}.txt", language, f"{title}\n\n{body}"))
    return result
