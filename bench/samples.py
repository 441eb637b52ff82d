"""Short texts in scripts and kinds of text the corpus lacks, written for this project.

Token estimates must not fall below the real count on text they were not fitted to; these texts check that
(in ``bench.estimator`` and the tests). Each is a few sentences, repeated with numbered variations to a few
thousand characters so the ratio is stable.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random

SENTENCES = {
    "hindi": (
        "आज सुबह शहर में हल्की बारिश हुई और पुस्तकालय के सामने बच्चे खेल रहे थे। "
        "मेरे दादाजी ने बताया कि यह पुराना पुल सौ साल से भी पहले बनाया गया था। "
        "शाम को हम नदी के किनारे टहलने गए और चाय की दुकान पर रुके।"
    ),
    "tamil": (
        "இன்று காலை நகரத்தில் லேசான மழை பெய்தது, நூலகத்தின் முன் குழந்தைகள் விளையாடிக் கொண்டிருந்தனர். "
        "இந்த பழைய பாலம் நூறு ஆண்டுகளுக்கு முன்பு கட்டப்பட்டது என்று என் தாத்தா சொன்னார்."
    ),
    "bengali": (
        "আজ সকালে শহরে হালকা বৃষ্টি হয়েছিল এবং গ্রন্থাগারের সামনে শিশুরা খেলছিল। "
        "আমার দাদু বললেন যে এই পুরনো সেতুটি একশো বছরেরও আগে তৈরি হয়েছিল।"
    ),
    "thai": (
        "เมื่อเช้านี้มีฝนตกเล็กน้อยในเมือง และเด็กๆ กำลังเล่นอยู่หน้าห้องสมุด "
        "คุณปู่บอกว่าสะพานเก่าแห่งนี้สร้างขึ้นเมื่อกว่าร้อยปีก่อน ตอนเย็นเราไปเดินเล่นริมแม่น้ำ"
    ),
    "arabic": (
        "هطل مطر خفيف على المدينة صباح اليوم، وكان الأطفال يلعبون أمام المكتبة. "
        "قال جدي إن هذا الجسر القديم بني قبل أكثر من مئة عام، وفي المساء تمشينا على ضفة النهر."
    ),
    "hebrew": (
        "הבוקר ירד גשם קל בעיר, והילדים שיחקו מול הספרייה. "
        "סבא שלי סיפר שהגשר הישן הזה נבנה לפני יותר ממאה שנה, ובערב טיילנו לאורך הנהר."
    ),
    "greek": (
        "Σήμερα το πρωί έβρεξε λίγο στην πόλη και τα παιδιά έπαιζαν μπροστά στη βιβλιοθήκη. "
        "Ο παππούς μου είπε ότι αυτή η παλιά γέφυρα χτίστηκε πριν από περισσότερα από εκατό χρόνια."
    ),
    "georgian": (
        "დღეს დილით ქალაქში მსუბუქი წვიმა მოვიდა და ბავშვები ბიბლიოთეკის წინ თამაშობდნენ. "
        "ბაბუამ მითხრა, რომ ეს ძველი ხიდი ასი წლის წინ ააშენეს."
    ),
    "armenian": (
        "Այսօր առավոտյան քաղաքում թեթև անձրև եկավ, և երեխաները խաղում էին գրադարանի առջև։ "
        "Պապիկս ասաց, որ այս հին կամուրջը կառուցվել է ավելի քան հարյուր տարի առաջ։"
    ),
    "amharic": ("ዛሬ ጠዋት በከተማው ቀላል ዝናብ ዘነበ፤ ልጆች በቤተ መጻሕፍቱ ፊት ይጫወቱ ነበር። አያቴ ይህ አሮጌ ድልድይ ከመቶ ዓመት በፊት እንደተሠራ ነገረኝ።"),
    "vietnamese": (
        "Sáng nay trời mưa nhẹ trong thành phố và bọn trẻ đang chơi trước thư viện. "
        "Ông tôi kể rằng cây cầu cũ này được xây dựng cách đây hơn một trăm năm."
    ),
    "polish": (
        "Dziś rano w mieście padał lekki deszcz, a dzieci bawiły się przed biblioteką. "
        "Mój dziadek powiedział, że ten stary most zbudowano ponad sto lat temu; wieczorem spacerowaliśmy nad rzeką."
    ),
    "turkish": (
        "Bu sabah şehirde hafif bir yağmur yağdı ve çocuklar kütüphanenin önünde oynuyordu. "
        "Dedem bu eski köprünün yüz yıldan daha uzun bir süre önce inşa edildiğini söyledi."
    ),
    "german": (
        "Heute Morgen regnete es leicht in der Stadt, und die Kinder spielten vor der Bibliothek. "
        "Mein Großvater erzählte, dass diese alte Brücke vor über hundert Jahren gebaut wurde."
    ),
    "emoji": "Great news 🎉🎉 the build passed ✅ 👍🏽 see you at 🕗 ☕️🥐 — 👨‍👩‍👧‍👦 trip to 🇯🇵 🗻 soon!! 😂😂🔥 ",
    "mixed_en_zh": "The function 计算总和 returns 总数 for each 用户 (see 文档 section 3.2); 错误 means retry. ",
    "python": (
        "def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:\n"
        "    merged: list[tuple[int, int]] = []\n"
        "    for start, end in sorted(intervals):\n"
        "        if merged and start <= merged[-1][1]:\n"
        "            merged[-1] = (merged[-1][0], max(merged[-1][1], end))\n"
        "        else:\n"
        "            merged.append((start, end))\n"
        "    return merged\n\n"
    ),
}


def _numbers_json(rng: random.Random) -> str:
    rows = [
        {
            "id": rng.randint(1, 10**9),
            "lat": round(rng.uniform(-90, 90), 6),
            "lon": round(rng.uniform(-180, 180), 6),
            "ts": f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00:00Z",
        }
        for _ in range(60)
    ]
    return json.dumps(rows, indent=1)


def _csv(rng: random.Random) -> str:
    lines = ["date,store,units,revenue,margin"]
    lines += [
        f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d},S{rng.randint(100, 999)},{rng.randint(0, 5000)},"
        f"{rng.uniform(0, 99999):.2f},{rng.uniform(-1, 1):.4f}"
        for _ in range(120)
    ]
    return "\n".join(lines)


def _hashes_and_base64(rng: random.Random) -> str:
    lines = []
    for i in range(40):
        blob = bytes(rng.getrandbits(8) for _ in range(48))
        lines.append(f"{hashlib.sha256(blob).hexdigest()} {base64.b64encode(blob).decode()} req-{i:05d}")
    return "\n".join(lines)


def unseen_samples(chars: int = 4_000) -> dict[str, str]:
    """Each sample at least ``chars`` characters long."""
    rng = random.Random(7)
    samples = {}
    for name, sentence in SENTENCES.items():
        parts, size, n = [], 0, 1
        while size < chars:
            part = f"{n}. {sentence}\n" if name not in ("python", "emoji", "mixed_en_zh") else sentence
            parts.append(part)
            size += len(part)
            n += 1
        samples[name] = "".join(parts)
    samples["numbers_json"] = _numbers_json(rng)
    samples["csv"] = _csv(rng)
    samples["hashes_base64"] = _hashes_and_base64(rng)
    return samples
