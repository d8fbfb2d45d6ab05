"""The ratios of BENCHMARKS.md's "The layer's path" from the runs beside this script."""
import glob, os, re, statistics
for rate in ("100","600"):
    for tag in ("one-sample","three-rounds"):
        files=sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), "%s", "%s-*.txt")%(tag,rate)))
        r1=[];r2=[];picks=[]
        for f in files:
            t=open(f).read()
            rows=dict((m.group(1),float(m.group(2))) for m in re.finditer(r"^(\S+/\S+/\S+)\s+([\d.]+) ms",t,re.M))
            m=re.search(r"^auto \((\S+)\)\s+([\d.]+) ms",t,re.M)
            if not m or not rows: continue
            best=min(rows.values()); bestp=min(rows,key=rows.get)
            r1.append(float(m.group(2))/best); r2.append(rows[m.group(1)]/best); picks.append("%s (fastest forced %s)"%(m.group(1),bestp))
        if r1:
            print(rate,tag,"n=%d"%len(r1),"auto/fastest median %.3f (%.3f-%.3f)"%(statistics.median(r1),min(r1),max(r1)),
              "chosen-forced/fastest median %.3f (%.3f-%.3f)"%(statistics.median(r2),min(r2),max(r2)))
            for p in picks: print("   ",p)
